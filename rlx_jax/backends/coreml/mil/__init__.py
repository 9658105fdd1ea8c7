"""IR -> MIL: the Core ML backend's lowering table (table.py), its rule families and the program
builder (program.py). Importing the package registers every family's rules in MIL_RULES."""
from . import conv, control, elementwise, index, reduce, shape  # noqa: F401
from . import nn, nn_attn, nn_conv, optim, special  # noqa: F401
from . import quant  # noqa: F401
from . import rnn  # noqa: F401
from . import xent  # noqa: F401
from . import sgd  # noqa: F401
