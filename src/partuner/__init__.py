"""partuner: profile, plan, partition and run ONNX models across several processing units."""

__version__ = "0.1.0"
