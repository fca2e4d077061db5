"""A Hugging Face Trainer with DetCallback on two ranks (tests/fixtures/hf_trainer.py under
``import determined``, det_lightning standing in): every rank uploads each checkpoint
(``shard=True``); each rank records what it saw in out/rank<N>.json."""

import json
import pathlib
import sys

import det_lightning.compat

det_lightning.compat.install()
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))

import determined as det  # noqa: E402  (the alias, installed above)

from tests.fixtures import hf_trainer  # noqa: E402

out = pathlib.Path("out")
out.mkdir(exist_ok=True)
with det.core.init() as core_context:
    trainer = hf_trainer.train(det, core_context, "hf-out", ddp_backend="gloo")
    rank = core_context.distributed.rank
    seen = {
        "rank": rank,
        "world_size": trainer.args.world_size,
        "published": sorted(
            e.metadata["steps_completed"] for e in core_context.checkpoint.store.published()
        ),
    }
(out / f"rank{rank}.json").write_text(json.dumps(seen))
