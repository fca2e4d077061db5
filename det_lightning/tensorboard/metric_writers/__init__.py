"""``determined.tensorboard.metric_writers``: ``pytorch.TorchWriter``."""
