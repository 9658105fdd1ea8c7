"""`@rlx_jax.jit` on a method: `Jitted.__get__` binds the instance as the first argument, static
(hashed with its `__hash__`, by identity unless the class defines one) unless it is a pytree node
of arrays (a registered pytree class, e.g. a dataclass of parameters), which is traced."""
import jax

_LEAF_TYPES: dict[type, bool] = {}   # type -> whether its instances are pytree leaves


def bind(jitted, obj, make_static):
    """What `jitted.__get__(obj)` returns: a Bound of `jitted` itself, or, for an instance that
    is a pytree leaf, of `make_static()` (the Jitted with argument 0 static)."""
    if obj is None:
        return jitted
    t = type(obj)
    leaf = _LEAF_TYPES.get(t)
    if leaf is None:
        leaf = _LEAF_TYPES[t] = jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(obj))
    if leaf and 0 not in jitted.static_argnums:
        return Bound(make_static(), obj)
    return Bound(jitted, obj)


class Bound:
    """A jitted method bound to an instance."""

    def __init__(self, jitted, obj):
        self._jitted, self._obj = jitted, obj
        self.__wrapped__ = jitted.__wrapped__
        self.__name__ = jitted.__name__

    def __call__(self, *args, **kwargs):
        return self._jitted(self._obj, *args, **kwargs)

    def lower(self, *args, **kwargs):
        return self._jitted.lower(self._obj, *args, **kwargs)
