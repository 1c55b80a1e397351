"""Program semantics, above the file format: what a method's instructions read and write, where each value's
bytes live and for how long.

``schema/`` says what a .pte file holds; this layer says what running it does, statically, written once:

* ``kernel_effects``: the one table of what a kernel reads and writes, by name (both return-slot conventions:
  out variants and prim ops write theirs, the device copies never do), and what any one instruction reads and
  writes;
* ``effects``: every instruction's reads and writes over a method (delegate outputs by the split, tensor lists
  expanded), and the uses of each value in program order;
* ``readers``: who uses each value (every argument, both ends of a MoveCall, a condition, a freed value, a list's
  membership, the outputs);
* ``regions``: where a value's bytes are: how many (``value_nbytes``), on which device (``memory_device``), its
  region (buffer, start, end) and an interval index over them;
* ``dataflow``: where a DelegateCall's inputs end and its outputs begin;
* ``memory``: lifetimes, which values share bytes, the device-memory layout and its independent check;
* ``transfers``: the host-to-device copies one call makes, and how many times each value is copied per call.
* ``method_context``: what judging one method's constants shares (readers, writers, static views, the work
  budget, the copy rule ``follow_copy``), below both verdicts: the plain one and fold's;
* ``copy_memory``: whether anything depended on a device copy having run (its output's memory, before and after).

``rewriter/`` and ``runner/`` both stand on it (tests/test_layers.py).
"""
