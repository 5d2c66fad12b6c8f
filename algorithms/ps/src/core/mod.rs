//! Sans-I/O decision logic of a bounded-staleness parameter server (Bösen / Petuum).
//!
//! Every piece is a plain struct whose inputs are method calls and whose outputs are returned
//! values; the actor/QUIC runtime routes them. Clock conventions used everywhere:
//!
//! * A worker's clock `c` is the number of `Clock()` calls it has made; updates made during
//!   iteration `c` are tagged with clock `c`.
//! * A shard's clock-table entry for a worker is that worker's number of *completed* clocks,
//!   i.e. the clock it is currently in. The shard's *min clock* `m` is the minimum of these over
//!   live workers: every update tagged `< m` of every worker has been applied.
//! * Row data carries a *row clock* equal to the shard's min clock when it was served, so a row
//!   with clock `r` reflects all updates of clocks `<= r - 1`.
//! * SSP with staleness `s`: a read at clock `c` needs row clock `>= c - s` (reflects every update
//!   from clocks `<= c - s - 1`). BSP is `s = 0`.
//! * Observed staleness of a served read = `max(0, c - row_clock)`, so under SSP/ESSP it is
//!   `<= s`. Counted in clocks of *other* workers' updates that may be missing, that is clocks
//!   `row_clock ..= c`, i.e. at most `s + 1` clocks including the one in progress; the reader's
//!   own updates are never missing (read-my-writes).
//! * ESSP: a read subscribes the reader to the row; at every min-clock advance the shard pushes
//!   to each subscriber the subscribed rows changed since they were last sent to it (an empty
//!   push still tells the client its rows from that shard are current as of the new clock).
//! * FIFO delivery per (client, shard) pair in each direction is assumed (QUIC streams).

pub mod checkpoint;
pub mod client;
pub mod error;
pub mod lda;
pub mod managed;
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

    use crate::core::types::{Consistency, TableId, TableKind, TableSpec};

    /// The table of [`spec`].
    pub const T: TableId = TableId(1);

    /// Table [`T`], dense and two columns wide, under `c`.
    pub fn spec(c: Consistency) -> TableSpec {
        TableSpec::new(1, "w", TableKind::Dense { width: 2 }, c)
    }
}
