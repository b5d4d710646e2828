"""16-bit gradients on the wire: the all-reduce sends float16 or bfloat16, the update applies float32.

Under MultiWorkerMirrored every step all-reduces every gradient (6.4 MB of
float32 for the classic CNN) through gRPC; halving the bytes halves the
copies and the time the workers wait for each other. The variables, the
optimizer's slots and the update stay float32: only the sum of the replicas'
gradients is rounded, once, to 16 bits.

The v1 optimizers all-reduce inside `_distributed_apply`, in one call to
`strategy.extended.batch_reduce_to`, and then update each variable through
`strategy.extended.update`. Each replica casts its gradients down before
`apply_gradients` hands them to that cross-replica step (there each is still
one tensor per replica, and the sum is computed on what it is given); the
step sees a view of the strategy whose `update` casts each replica's summed
gradient back to its variable's dtype. Nothing else of the strategy changes.
"""

from __future__ import annotations

import tensorflow as tf

WIRE_DTYPES = {"fp16": tf.float16, "bf16": tf.bfloat16}


def _is_float32(value) -> bool:
    return value is not None and getattr(value, "dtype", None) == tf.float32


class _WideningExtended:
    """A strategy's `extended` whose `update` hands the update function float32 gradients."""

    def __init__(self, extended, wire_dtype):
        self._extended, self._wire_dtype = extended, wire_dtype

    def __getattr__(self, name):
        return getattr(self._extended, name)

    def update(self, var, fn, args=(), kwargs=None, group=True):
        def widened(v, *values, **named):
            # Per replica: `v` is this replica's variable, `values` its summed gradient.
            values = [tf.cast(g, v.dtype.base_dtype) if getattr(g, "dtype", None) == self._wire_dtype else g
                      for g in values]
            return fn(v, *values, **named)

        return self._extended.update(var, widened, args=args, kwargs=kwargs, group=group)


class _WideningStrategy:
    """A strategy whose variable updates widen 16-bit gradients; everything else is the strategy's own."""

    def __init__(self, strategy, wire_dtype):
        self._strategy = strategy
        self.extended = _WideningExtended(strategy.extended, wire_dtype)

    def __getattr__(self, name):
        return getattr(self._strategy, name)


def compress_gradients(optimizer, compression: str):
    """Makes a v1 optimizer all-reduce its float32 gradients as `compression` ("none", "fp16", "bf16").

    Returns the optimizer. MixedPrecisionLossScaleOptimizer, which calls the
    wrapped optimizer's `apply_gradients` in each replica, inherits it. Relies
    on TF 2.15's v1 `Optimizer.apply_gradients` handing the replicas' gradients
    to `_distributed_apply` through `merge_call`; pinned by
    tests/unit/test_gradient_compression.py and, across processes, by
    tests/e2e/test_multi_host.py::test_mwms_across_two_hosts_finishes_and_applies_each_task_s_settings.
    """
    if compression == "none":
        return optimizer
    wire_dtype = WIRE_DTYPES[compression]
    apply_gradients = optimizer.apply_gradients
    distributed_apply = optimizer._distributed_apply  # pylint: disable=protected-access

    def narrowing_apply_gradients(grads_and_vars, global_step=None, name=None, **kwargs):
        if tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context():
            grads_and_vars = [(tf.cast(g, wire_dtype) if _is_float32(g) else g, v) for g, v in grads_and_vars]
        return apply_gradients(grads_and_vars, global_step, name, **kwargs)

    def widening_distributed_apply(distribution, grads_and_vars, global_step=None, name=None):
        return distributed_apply(_WideningStrategy(distribution, wire_dtype), grads_and_vars, global_step, name)

    optimizer.apply_gradients = narrowing_apply_gradients
    optimizer._distributed_apply = widening_distributed_apply  # pylint: disable=protected-access
    return optimizer
