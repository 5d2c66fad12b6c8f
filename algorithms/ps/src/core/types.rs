// Over 600 lines: the row type and its compact wire encoding belong together.
//! Identifiers, table specifications, rows, wire messages and row placement.

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::core::error::PsCoreError;

/// Table identifier (tables are created up front, identical on every node).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TableId(pub u32);

/// Row identifier inside a table; the row is the unit of partitioning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RowId(pub u64);

/// Worker identifier, dense in `0..n_workers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WorkerId(pub u32);

/// A worker's clock: the number of `Clock()` calls it has made (see [`crate::core`]).
pub type Clock = u64;

/// Consistency model of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Consistency {
    /// Bulk synchronous: a read at clock `c` reflects every update of clocks `<= c - 1`.
    Bsp,
    /// Stale synchronous parallel, lazy pull.
    Ssp {
        /// Clocks a read may lag.
        staleness: u32,
    },
    /// Eager SSP: same bound as SSP, shards push subscribed rows when their min clock advances.
    Essp {
        /// Clocks a read may lag.
        staleness: u32,
    },
    /// No bound: a cached row is always served, a shard serves reads at once.
    Async,
}

impl Consistency {
    /// Minimum row clock a read at worker clock `c` needs; `None` for `Async` (any cached copy).
    pub fn required_row_clock(self, c: Clock) -> Option<Clock> {
        (self.staleness_bound()).map(|s| c.saturating_sub(u64::from(s)))
    }

    /// Whether shards push (ESSP).
    pub fn is_essp(self) -> bool {
        matches!(self, Consistency::Essp { .. })
    }

    /// The model named `model` with bound `staleness` (used by the SSP variants only).
    pub fn new(model: ConsistencyModel, staleness: u32) -> Consistency {
        match model {
            ConsistencyModel::Bsp => Consistency::Bsp,
            ConsistencyModel::Ssp => Consistency::Ssp { staleness },
            ConsistencyModel::Essp => Consistency::Essp { staleness },
            ConsistencyModel::Async => Consistency::Async,
        }
    }

    /// The staleness bound: 0 for BSP, `s` for SSP/ESSP, none for async.
    pub fn staleness_bound(self) -> Option<u32> {
        match self {
            Consistency::Bsp => Some(0),
            Consistency::Ssp { staleness } | Consistency::Essp { staleness } => Some(staleness),
            Consistency::Async => None,
        }
    }
}

/// The consistency model a user chooses (`consistency = "ssp"`, `--consistency ssp`), in
/// any case; [`Consistency::new`] adds the staleness bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConsistencyModel {
    /// Bulk synchronous parallel.
    Bsp,
    /// Stale synchronous parallel (lazy pull).
    #[default]
    Ssp,
    /// Eager SSP (shards push subscribed rows).
    Essp,
    /// No staleness bound.
    Async,
}

impl std::str::FromStr for ConsistencyModel {
    type Err = PsCoreError;
    fn from_str(s: &str) -> Result<Self, PsCoreError> {
        match s.to_ascii_lowercase().as_str() {
            "bsp" => Ok(ConsistencyModel::Bsp),
            "ssp" => Ok(ConsistencyModel::Ssp),
            "essp" => Ok(ConsistencyModel::Essp),
            "async" => Ok(ConsistencyModel::Async),
            _ => Err(PsCoreError::UnknownConsistency(s.to_string())),
        }
    }
}

impl std::fmt::Display for ConsistencyModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConsistencyModel::Bsp => "bsp",
            ConsistencyModel::Ssp => "ssp",
            ConsistencyModel::Essp => "essp",
            ConsistencyModel::Async => "async",
        })
    }
}

// Hand-written so that settings keep accepting any case (`"SSP"`), as they always did.
impl<'de> Deserialize<'de> for ConsistencyModel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// Dense rows have a fixed width; sparse rows hold sorted `(col, value)` pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TableKind {
    /// Dense rows of `width` columns.
    Dense {
        /// Columns.
        width: u32,
    },
    /// Sorted `(column, value)` pairs.
    Sparse,
}

/// Which server-side update rule a table uses (see `crate::core::rules`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub enum UpdateRuleSpec {
    /// `value += delta` (Bösen's default).
    #[default]
    Sum,
    /// `value -= learning_rate * gradient`.
    Sgd {
        /// Step size.
        learning_rate: f32,
    },
    /// `v = momentum * v + g; value -= learning_rate * v` (per-row velocity kept on the shard).
    SgdMomentum {
        /// Step size.
        learning_rate: f32,
        /// Velocity decay.
        momentum: f32,
    },
    /// `G += g^2; value -= learning_rate * g / (sqrt(G) + eps)`.
    Adagrad {
        /// Step size.
        learning_rate: f32,
        /// Added to the root of the accumulator.
        eps: f32,
    },
    /// AdaRevision (see `core::rules::AdaRevision`): rows hold `width` values then their
    /// gradient sums `z`; a delta holds the gradient then the `z` the worker read.
    AdaRevision {
        /// Base step size `alpha`.
        learning_rate: f32,
        /// Initial accumulator (> 0): the first step is `alpha / sqrt(initial_accumulator)`.
        initial_accumulator: f32,
        /// Value columns per row (the row is `2 * width` wide).
        width: u32,
    },
    /// A rule registered by name in a `RuleRegistry`.
    Custom {
        /// The registered name.
        name: String,
    },
}

impl UpdateRuleSpec {
    /// Whether the rule keeps no state besides the row (`sum`, `sgd`): only then can the
    /// rows be checkpointed and a delta be applied to a checkpoint's copy too.
    pub fn state_in_row(&self) -> bool {
        matches!(self, UpdateRuleSpec::Sum | UpdateRuleSpec::Sgd { .. })
    }

    /// Scale with which a client applies its *own* deltas to its cached rows (read-my-writes),
    /// since it does not run the shard's rule: exact for `Sum` (1) and `Sgd` (`-lr`), first
    /// order for momentum, additive (1) for custom rules. Adagrad's real step can be far
    /// smaller than `lr * g` (guessing it diverged), and AdaRevision's deltas carry the read
    /// `z`, so both leave the cached row as read (0).
    pub fn local_scale(&self) -> f32 {
        match self {
            UpdateRuleSpec::AdaRevision { .. } | UpdateRuleSpec::Adagrad { .. } => 0.0,
            UpdateRuleSpec::Sum | UpdateRuleSpec::Custom { .. } => 1.0,
            UpdateRuleSpec::Sgd { learning_rate }
            | UpdateRuleSpec::SgdMomentum { learning_rate, .. } => -*learning_rate,
        }
    }
}

/// A table, identical on every node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableSpec {
    /// Its id.
    pub id: TableId,
    /// Its name (unique).
    pub name: String,
    /// Dense or sparse.
    pub kind: TableKind,
    /// Its consistency model.
    pub consistency: Consistency,
    /// The shard-side update rule.
    pub update_rule: UpdateRuleSpec,
    /// Read-my-writes (default on): a worker's reads include its own updates the shard has
    /// not applied yet. Off, a cached row is the shard's value only (ps-lite's push/pull).
    #[serde(default = "read_my_writes_default")]
    pub read_my_writes: bool,
    /// Updates each shard holds back before applying one (0: applied on arrival): an
    /// injected delay, counted in updates to the shard, for delay-tolerance experiments.
    #[serde(default)]
    pub update_delay: u64,
    /// Shards follow each reply and push with the writers' clocks it holds
    /// (`ShardAction::Content`), so readers measure content staleness.
    #[serde(default)]
    pub content_clocks: bool,
}

fn read_my_writes_default() -> bool {
    true
}

impl TableSpec {
    /// Convenience constructor with the `Sum` rule.
    pub fn new(id: u32, name: &str, kind: TableKind, consistency: Consistency) -> Self {
        TableSpec {
            id: TableId(id),
            name: name.to_string(),
            kind,
            consistency,
            update_rule: UpdateRuleSpec::Sum,
            read_my_writes: true,
            update_delay: 0,
            content_clocks: false,
        }
    }

    /// The same table with read-my-writes on or off.
    pub fn with_read_my_writes(mut self, on: bool) -> Self {
        self.read_my_writes = on;
        self
    }

    /// The same table with each shard holding every update back for `delay` later ones.
    pub fn with_update_delay(mut self, delay: u64) -> Self {
        self.update_delay = delay;
        self
    }

    /// The same table with content clocks on or off (see `content_clocks`).
    pub fn with_content_clocks(mut self, on: bool) -> Self {
        self.content_clocks = on;
        self
    }

    /// The same table with update rule `rule`.
    pub fn with_rule(mut self, rule: UpdateRuleSpec) -> Self {
        self.update_rule = rule;
        self
    }

    /// An all-zero row of this table's kind (rows not yet written read as zeros).
    pub fn zero_row(&self) -> Row {
        match self.kind {
            TableKind::Dense { width } => Row::Dense(vec![0.0; width as usize]),
            TableKind::Sparse => Row::Sparse(Vec::new()),
        }
    }

    /// Checks that `delta` fits this table (width, kind, sparse columns strictly increasing).
    pub fn check_delta(&self, row: RowId, delta: &Row) -> Result<(), PsCoreError> {
        let bad = |reason: String| PsCoreError::RowMismatch {
            table: self.id,
            row,
            reason,
        };
        match (self.kind, delta) {
            (TableKind::Dense { width }, Row::Dense(v)) if v.len() != width as usize => {
                Err(bad(format!("dense width {} != {}", v.len(), width)))
            }
            (TableKind::Dense { width }, Row::Sparse(p)) => {
                if let Some(&(c, _)) = p.iter().find(|(c, _)| *c >= width) {
                    return Err(bad(format!("column {c} >= width {width}")));
                }
                unsorted(p).map_or(Ok(()), |r| Err(bad(r)))
            }
            (TableKind::Sparse, Row::Dense(_)) => Err(bad("dense delta for sparse table".into())),
            (TableKind::Sparse, Row::Sparse(p)) => unsorted(p).map_or(Ok(()), |r| Err(bad(r))),
            _ => Ok(()),
        }
    }
}

/// The reason a sparse row is not sorted by strictly increasing column, if it is not.
fn unsorted(p: &[(u32, f32)]) -> Option<String> {
    (!p.windows(2).all(|w| w[0].0 < w[1].0))
        .then(|| "sparse columns not strictly increasing".to_string())
}

/// A row: dense `Vec<f32>` or sparse `(col, value)` pairs sorted by strictly increasing column.
/// Serialized as msgpack `bin`s of little-endian bytes, never as float arrays.
#[derive(Debug, Clone, PartialEq)]
pub enum Row {
    /// All columns.
    Dense(Vec<f32>),
    /// `(column, value)` pairs, strictly increasing columns.
    Sparse(Vec<(u32, f32)>),
}

impl Row {
    /// Value at column `col` (0 when absent or out of range).
    pub fn get(&self, col: u32) -> f32 {
        match self {
            Row::Dense(v) => v.get(col as usize).copied().unwrap_or(0.0),
            Row::Sparse(p) => p
                .binary_search_by_key(&col, |e| e.0)
                .map(|i| p[i].1)
                .unwrap_or(0.0),
        }
    }

    /// `self[col] += delta`. Out-of-range columns of a dense row are ignored (callers validate
    /// with `TableSpec::check_delta`); sparse rows drop entries that become exactly zero.
    pub fn inc(&mut self, col: u32, delta: f32) {
        self.apply_entry(col, delta, &mut |x, d| *x += d);
    }

    /// Its `(column, value)` entries: every column of a dense row, the pairs of a sparse one.
    pub fn entries(&self) -> impl Iterator<Item = (u32, f32)> + '_ {
        let (dense, sparse) = match self {
            Row::Dense(v) => (Some(v.iter().enumerate()), None),
            Row::Sparse(p) => (None, Some(p.iter().copied())),
        };
        let dense = dense.into_iter().flatten().map(|(c, &x)| (c as u32, x));
        dense.chain(sparse.into_iter().flatten())
    }

    /// `self += other`.
    pub fn add(&mut self, other: &Row) {
        self.add_scaled(other, 1.0);
    }

    /// `self += alpha * other`, for every combination of kinds.
    pub fn add_scaled(&mut self, other: &Row, alpha: f32) {
        match self {
            Row::Dense(a) => {
                for (c, y) in other.entries() {
                    if let Some(x) = a.get_mut(c as usize) {
                        *x += alpha * y;
                    }
                }
            }
            Row::Sparse(a) => merge_sparse(a, other.entries().filter(|e| e.1 != 0.0), alpha),
        }
    }

    /// Applies `f(value, delta)` to every entry present in `delta`.
    pub fn apply_with(&mut self, delta: &Row, mut f: impl FnMut(&mut f32, f32)) {
        for (c, g) in delta.entries() {
            self.apply_entry(c, g, &mut f);
        }
    }

    fn apply_entry(&mut self, col: u32, g: f32, f: &mut impl FnMut(&mut f32, f32)) {
        match self {
            Row::Dense(v) => {
                if let Some(x) = v.get_mut(col as usize) {
                    f(x, g);
                }
            }
            Row::Sparse(p) => match p.binary_search_by_key(&col, |e| e.0) {
                Ok(i) => {
                    f(&mut p[i].1, g);
                    if p[i].1 == 0.0 {
                        p.remove(i);
                    }
                }
                Err(i) => {
                    let mut x = 0.0;
                    f(&mut x, g);
                    if x != 0.0 {
                        p.insert(i, (col, x));
                    }
                }
            },
        }
    }

    /// Sum of absolute values (used by managed communication's relative magnitude).
    pub fn l1_norm(&self) -> f32 {
        self.entries().map(|(_, x)| x.abs()).sum()
    }

    /// Approximate encoded size in bytes (payload plus a fixed per-row overhead).
    pub fn wire_size(&self) -> usize {
        const OVERHEAD: usize = 24;
        match self {
            Row::Dense(v) => OVERHEAD + 4 * v.len(),
            Row::Sparse(p) => OVERHEAD + 8 * p.len(),
        }
    }

    /// Decodes and validates rmp-serde bytes (the wire and checkpoint format).
    pub fn decode(bytes: &[u8]) -> Result<Row, PsCoreError> {
        rmp_serde::from_slice(bytes).map_err(|e| PsCoreError::Decode(e.to_string()))
    }

    /// Dense copy of width `width` (sparse entries outside it are dropped).
    pub fn to_dense(&self, width: usize) -> Vec<f32> {
        let mut out = vec![0.0; width];
        for (c, x) in self.entries() {
            if let Some(o) = out.get_mut(c as usize) {
                *o = x;
            }
        }
        out
    }
}

fn merge_sparse(a: &mut Vec<(u32, f32)>, b: impl Iterator<Item = (u32, f32)>, alpha: f32) {
    let old = std::mem::take(a);
    let mut out = Vec::with_capacity(old.len());
    let mut ia = old.into_iter().peekable();
    let mut ib = b.peekable();
    loop {
        let next = match (ia.peek(), ib.peek()) {
            (None, None) => break,
            (Some(_), None) => ia.next(),
            (None, Some(_)) => ib.next().map(|(c, y)| (c, alpha * y)),
            (Some(&(ca, _)), Some(&(cb, _))) => {
                if ca < cb {
                    ia.next()
                } else if cb < ca {
                    ib.next().map(|(c, y)| (c, alpha * y))
                } else {
                    match (ia.next(), ib.next()) {
                        (Some((c, x)), Some((_, y))) => Some((c, x + alpha * y)),
                        _ => None,
                    }
                }
            }
        };
        if let Some(e) = next
            && e.1 != 0.0
        {
            out.push(e);
        }
    }
    *a = out;
}

/// A [`Row`] shared by reference count and copied on write ([`SharedRow::make_mut`]), so a
/// stored row, the replies and pushes carrying it, cached rows and read-my-writes copies
/// share one buffer. It encodes exactly as a [`Row`].
#[derive(Debug, Clone, PartialEq)]
pub struct SharedRow(Arc<Row>);

impl SharedRow {
    /// Shares `row`.
    pub fn new(row: Row) -> Self {
        SharedRow(Arc::new(row))
    }

    /// The row, without a copy if this is its only holder.
    pub fn into_row(self) -> Row {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone())
    }

    /// The row to write: copied first only if another holder still reads it.
    pub fn make_mut(&mut self) -> &mut Row {
        Arc::make_mut(&mut self.0)
    }
}

impl std::ops::Deref for SharedRow {
    type Target = Row;
    fn deref(&self) -> &Row {
        &self.0
    }
}

impl From<Row> for SharedRow {
    fn from(row: Row) -> Self {
        SharedRow::new(row)
    }
}

impl Serialize for SharedRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SharedRow {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Row::deserialize(d).map(SharedRow::new)
    }
}

/// Wire form of `Row`: raw little-endian bytes in msgpack `bin` payloads, borrowed where
/// possible (a dense row is encoded straight from its buffer).
#[derive(Serialize, Deserialize)]
#[serde(rename = "RowWire")]
enum RowWire<'a> {
    D(#[serde(borrow, with = "serde_bytes")] Cow<'a, [u8]>),
    S {
        #[serde(borrow, with = "serde_bytes")]
        cols: Cow<'a, [u8]>,
        #[serde(borrow, with = "serde_bytes")]
        vals: Cow<'a, [u8]>,
    },
}

impl Serialize for Row {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Row::Dense(v) => RowWire::D(f32_le_bytes(v)).serialize(s),
            Row::Sparse(p) => RowWire::S {
                cols: Cow::Owned(p.iter().flat_map(|(c, _)| c.to_le_bytes()).collect()),
                vals: Cow::Owned(p.iter().flat_map(|(_, x)| x.to_le_bytes()).collect()),
            }
            .serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Row {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Row::try_from(RowWire::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// The little-endian bytes of `v`: borrowed on little-endian hosts.
fn f32_le_bytes(v: &[f32]) -> Cow<'_, [u8]> {
    #[cfg(target_endian = "little")]
    {
        Cow::Borrowed(bytemuck::cast_slice(v))
    }
    #[cfg(target_endian = "big")]
    {
        Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }
}

fn le_words(b: &[u8]) -> Result<impl Iterator<Item = [u8; 4]> + '_, PsCoreError> {
    if !b.len().is_multiple_of(4) {
        return Err(PsCoreError::MalformedRow(format!(
            "byte length {} is not a multiple of 4",
            b.len()
        )));
    }
    Ok(b.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]))
}

impl TryFrom<RowWire<'_>> for Row {
    type Error = PsCoreError;
    fn try_from(w: RowWire<'_>) -> Result<Self, PsCoreError> {
        match w {
            RowWire::D(b) => petrel_messages::tensor::from_le_bytes(&b)
                .map(Row::Dense)
                .map_err(|e| PsCoreError::MalformedRow(e.to_string())),
            RowWire::S { cols, vals } => {
                if cols.len() != vals.len() {
                    return Err(PsCoreError::MalformedRow(
                        "sparse cols/vals length mismatch".into(),
                    ));
                }
                let p: Vec<(u32, f32)> = le_words(&cols)?
                    .map(u32::from_le_bytes)
                    .zip(le_words(&vals)?.map(f32::from_le_bytes))
                    .collect();
                if let Some(reason) = unsorted(&p) {
                    return Err(PsCoreError::MalformedRow(reason));
                }
                Ok(Row::Sparse(p))
            }
        }
    }
}

/// Row placement: which of `n_shards` (0 counts as 1) owns `(table, row)`. A deterministic
/// SplitMix64 hash, so every process agrees and row 0 of every table is not on one shard.
pub fn shard_of(table: TableId, row: RowId, n_shards: u32) -> u32 {
    (row_hash(table, row) % u64::from(n_shards.max(1))) as u32
}

/// The hash [`shard_of`] and [`crate::core::placement::Placement`] place `(table, row)` by.
pub fn row_hash(table: TableId, row: RowId) -> u64 {
    mix64(row.0 ^ u64::from(table.0).rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15)
}

/// SplitMix64's finalizer: every bit of `z` spread over the whole word.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One row delta inside an update batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowUpdate {
    /// The table.
    pub table: TableId,
    /// The row.
    pub row: RowId,
    /// The delta (shared with the copy a client keeps for read-my-writes).
    pub delta: SharedRow,
}

/// A worker's flushed (or early-sent) oplog for one shard. `seq` counts a client's batches
/// from 1; shards echo the last applied one (`ack_seq`) in replies and pushes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateBatch {
    /// Sequence number per (worker, shard).
    pub seq: u64,
    /// The row updates.
    pub updates: Vec<RowUpdate>,
}

/// Client -> shard: an update batch for clock `clock`, which it ends if `end_of_clock`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardBatch {
    /// The target shard.
    pub shard: u32,
    /// The sender.
    pub worker: WorkerId,
    /// The clock the updates belong to.
    pub clock: Clock,
    /// Whether the batch ends the clock.
    pub end_of_clock: bool,
    /// The updates.
    pub batch: UpdateBatch,
}

/// Client -> shard: read `(table, row)` once the shard's min clock is `>= min_clock`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadRequest {
    /// The target shard.
    pub shard: u32,
    /// The reader.
    pub worker: WorkerId,
    /// Its request id (answered in the reply).
    pub request_id: u64,
    /// The table.
    pub table: TableId,
    /// The row.
    pub row: RowId,
    /// The min clock the row must reflect.
    pub min_clock: Clock,
}

#[cfg(test)]
mod tests;
