from .graph import Builder, Graph, Node, Value, dtype_name
from .ops import BACKWARD, EXTENSIONS, FORWARD, PRIMITIVE, OpKind

__all__ = ["Builder", "Graph", "Node", "Value", "dtype_name", "OpKind", "BACKWARD", "EXTENSIONS",
           "FORWARD", "PRIMITIVE"]
