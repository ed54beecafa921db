"""The transaction core shared by ``swap``, ``rollback``, ``up`` and ``recover``.

* :mod:`.context` - :class:`~.context.TxContext`: one transaction's view of the host's
  :class:`~servectl.service.context.Context` (where the wiring has its one home): the cards its stops wait on,
  its wait for the lock, the phases it times;
* :mod:`.model` - what a transaction reports: phases, a failed start, :class:`~.model.SwapResult`;
* :mod:`.snapshot` - the previous service's profile document kept in the journal, and compiling it back;
* :mod:`.undo` - the one way back: :func:`~.undo.undo` (remove the unproven target, finish stopping the
  previous service, start it again from the journal's snapshot, wait for the cards, restore the conflicts,
  record), used by swap's failure path, ``recover``, ``rollback`` of a killed transaction and ``up``'s
  interrupt handler, which only word the outcome.

The package face re-exports nothing; import from the modules.
"""
