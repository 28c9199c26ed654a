"""hvd.keras.callbacks: the callbacks of hvd.tensorflow.keras.callbacks
(written by hvd-plugin-tensorflow with hvd.tensorflow)."""
from hvd.tensorflow.keras.callbacks import (BroadcastGlobalVariablesCallback, MetricAverageCallback,  # noqa: F401
                                            LearningRateScheduleCallback, LearningRateWarmupCallback)
