"""What users and admins write: job specs and their bounds (``specs``), the
``#CORRAL`` directives of a batch script (``directives``) and the service's
configuration file (``config``).

May import: the model, perf (GPU type names), the policies' registry (to check
names and options) and nothing else of the runtime; everything else of the runtime may import it.
"""
