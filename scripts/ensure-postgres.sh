#!/usr/bin/env bash
# The PostgreSQL server the search tests start (tests/fixtures/postgres.py): installs Debian's
# `postgresql` package when no /usr/lib/postgresql/*/bin/initdb exists. Needs root (CI is);
# without it, says what to install and leaves the tests to fail naming the missing server.
set -euo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "ensure-postgres: no PostgreSQL server; install it: sudo apt-get install postgresql" >&2
  exit 0
fi
# The tests make their own clusters: the package's default one (a server on port 5432,
# started by the install) is not wanted.
if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
  mkdir -p /etc/postgresql-common
  echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confold postgresql
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || {
  echo "ensure-postgres: apt-get installed postgresql, but no initdb is there" >&2
  exit 1
}
