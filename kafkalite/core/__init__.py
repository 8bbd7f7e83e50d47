"""The pure, synchronous, deterministic core (DESIGN section 9, STYLE habits 1-7, 12).

Standard library only; no I/O, no asyncio, no wall clock (time is `now_ms`). Modules:
- codes: Kafka error numbers (ErrorCode) and typed operating errors (CoreError.code);
- replica_state / replica_types: per-partition leader/follower state, HW, ISR changes
  through AlterIsr with explicit pending phases (KIP-497);
- truncation: follower truncation by leader epoch and OffsetsForLeaderEpoch (KIP-101);
- election: controller decisions (elections, broker failure, controlled shutdown,
  preferred leaders, AlterIsr validation, imbalance, reassignment helpers);
- placement: replica assignment (Kafka AdminUtils, rack aware);
- purgatory: delayed operations keyed by partition; DelayedProduce / DelayedFetch;
- producer_state: idempotent producer de-duplication;
- invariants: checkers for the simulator and tests.
"""
