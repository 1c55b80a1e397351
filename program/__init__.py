"""Program semantics, above the file format: what a method's instructions read and write, where each value's
bytes live and for how long.

``schema/`` says what a .pte file holds; this layer says what running it does, statically, written once:

* ``effects``: every instruction's reads and writes as the runtime does them (kernel out arguments, delegate
  outputs, MoveCall, tensor lists expanded), and the uses of each value in program order;
* ``regions``: a planned value's bytes (buffer, start, end) and an interval index over them;
* ``dataflow``: where a DelegateCall's inputs end and its outputs begin;
* ``memory``: lifetimes, which values share bytes, the device-memory layout and its independent check;
* ``transfers``: the host-to-device copies one call makes.

``rewriter/`` and ``runner/`` both stand on it (tests/test_layers.py).
"""
