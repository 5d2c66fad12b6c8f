//! Sans-I/O decision logic of a bounded-staleness parameter server (Bösen / Petuum): plain
//! structs whose inputs are method calls and whose outputs are returned values; the runtime
//! routes them. Clock conventions used everywhere:
//!
//! * A worker's clock `c` is the number of `Clock()` calls it has made; its updates during
//!   iteration `c` are tagged `c`.
//! * A shard's clock-table entry for a worker is its number of *completed* clocks; the
//!   shard's *min clock* `m` over live workers means every update tagged `< m` is applied.
//! * A served row carries a *row clock* `r`, the shard's min clock then: it reflects every
//!   update of clocks `<= r - 1`.
//! * SSP with staleness `s`: a read at clock `c` needs row clock `>= c - s`; BSP is `s = 0`.
//!   The observed staleness `max(0, c - row_clock)` is then `<= s`; the reader's own updates
//!   are never missing (read-my-writes).
//! * ESSP: a read subscribes the reader to the row; at every min-clock advance the shard
//!   pushes each subscriber the subscribed rows changed since last sent (an empty push still
//!   says its rows from that shard are current).
//! * FIFO delivery per (client, shard) pair in each direction is assumed.

pub mod checkpoint;
pub mod client;
pub mod delay;
pub mod error;
pub mod lda;
pub mod managed;
pub mod membership;
pub mod placement;
pub mod rules;
pub mod server_push;
pub mod shard;
pub mod stats;
pub mod straggler;
pub mod types;

#[cfg(test)]
mod sim_tests;

#[cfg(test)]
pub(crate) mod testing {
    //! Fixtures shared by the core's tests.

    use crate::core::types::{
        Clock, Consistency, ReadRequest, RowId, TableId, TableKind, TableSpec, WorkerId,
    };

    /// The table of [`spec`].
    pub const T: TableId = TableId(1);

    /// Table [`T`], dense and two columns wide, under `c`.
    pub fn spec(c: Consistency) -> TableSpec {
        TableSpec::new(1, "w", TableKind::Dense { width: 2 }, c)
    }

    /// A read request of `row` of `table` (cores ignore its `shard`).
    pub fn read(
        worker: WorkerId,
        request_id: u64,
        table: TableId,
        row: RowId,
        min_clock: Clock,
    ) -> ReadRequest {
        ReadRequest {
            shard: 0,
            worker,
            request_id,
            table,
            row,
            min_clock,
        }
    }
}
