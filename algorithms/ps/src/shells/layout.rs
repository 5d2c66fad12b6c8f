//! What a PS job is made of: its tables ([`TablesBuilder`]) and where its shards and
//! workers run ([`PsLayout`]).

use serde::{Deserialize, Serialize};

use crate::core::error::PsCoreError;
use crate::core::types::{Consistency, TableKind, TableSpec, UpdateRuleSpec};

/// Builds the table list of a PS job: ids are assigned in order from 0.
#[derive(Debug, Clone, Default)]
pub struct TablesBuilder {
    tables: Vec<TableSpec>,
}

impl TablesBuilder {
    /// No tables yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A table of dense f32 rows of `width`.
    pub fn dense(self, name: &str, width: u32, consistency: Consistency) -> Self {
        self.table(name, TableKind::Dense { width }, consistency)
    }

    /// A table of sparse rows.
    pub fn sparse(self, name: &str, consistency: Consistency) -> Self {
        self.table(name, TableKind::Sparse, consistency)
    }

    fn table(mut self, name: &str, kind: TableKind, consistency: Consistency) -> Self {
        let id = self.tables.len() as u32;
        self.tables
            .push(TableSpec::new(id, name, kind, consistency));
        self
    }

    /// Sets the server-side update rule of the table added last.
    pub fn rule(mut self, rule: UpdateRuleSpec) -> Self {
        if let Some(t) = self.tables.last_mut() {
            t.update_rule = rule;
        }
        self
    }

    /// The tables, checked: at least one, names unique.
    pub fn build(self) -> Result<Vec<TableSpec>, PsCoreError> {
        let mut names: Vec<&str> = self.tables.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(PsCoreError::InvalidConfig(format!(
                "duplicate table name {}",
                w[0]
            )));
        }
        if self.tables.is_empty() {
            return Err(PsCoreError::InvalidConfig("no tables".into()));
        }
        Ok(self.tables)
    }
}

/// Where a PS job runs: shard `s` on `shard_nodes[s]`, worker `w` on `worker_nodes[w]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PsLayout {
    /// Node of each shard.
    pub shard_nodes: Vec<String>,
    /// Node of each worker.
    pub worker_nodes: Vec<String>,
}

impl PsLayout {
    /// Number of shards.
    pub fn n_shards(&self) -> u32 {
        self.shard_nodes.len() as u32
    }

    /// Number of workers.
    pub fn n_workers(&self) -> u32 {
        self.worker_nodes.len() as u32
    }

    /// Shard ids hosted by `node`.
    pub fn shards_on(&self, node: &str) -> Vec<u32> {
        (0..self.n_shards())
            .filter(|&s| self.shard_nodes[s as usize] == node)
            .collect()
    }

    /// Worker ids hosted by `node`.
    pub fn workers_on(&self, node: &str) -> Vec<u32> {
        (0..self.n_workers())
            .filter(|&w| self.worker_nodes[w as usize] == node)
            .collect()
    }
}
