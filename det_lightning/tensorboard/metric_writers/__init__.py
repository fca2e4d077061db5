"""``determined.tensorboard.metric_writers``: ``pytorch.TorchWriter``."""

from det_lightning._refused import module_getattr

__getattr__ = module_getattr(__name__)
