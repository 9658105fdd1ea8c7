from .graph import Builder, Graph, Node, Value, dtype_name
from .ops import BACKWARD, CONTROL, EXTENSIONS, FORWARD, PRIMITIVE, OpKind

__all__ = ["Builder", "Graph", "Node", "Value", "dtype_name", "OpKind", "BACKWARD", "CONTROL", "EXTENSIONS",
           "FORWARD", "PRIMITIVE"]
