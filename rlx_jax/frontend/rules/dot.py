"""dot_general (contractions; the linear-algebra primitives are in decompositions.py)."""
import numpy as np

from ...ir.ops import OpKind as K
from . import jaxpr_rule


@jaxpr_rule("dot_general")
def _dot_general(ctx, x, y, *, dimension_numbers, preferred_element_type=None, **params):
    (lc, rc), (lb, rb) = dimension_numbers
    dn = ((tuple(int(i) for i in lc), tuple(int(i) for i in rc)),
          (tuple(int(i) for i in lb), tuple(int(i) for i in rb)))
    pet = None if preferred_element_type is None else np.dtype(preferred_element_type)
    return ctx.emit(K.DotGeneral, (x, y), dimension_numbers=dn, preferred_element_type=pet)
