//! Membership plans for testing elastic jobs: `at=2s add worker; at=5s remove w1` starts a
//! standby node and asks a member to drain and leave at those times after the cluster
//! formed. Parsed and resolved here, free of I/O; the launcher starts the added nodes and
//! the coordinator asks the removed ones to leave.

use crate::error::NodeError;
use crate::settings::Settings;
use std::collections::BTreeSet;
use std::time::Duration;

/// The membership flags of `petrel train`: standby nodes and the plan that starts them
/// and asks members to leave. Every app flattens this one struct; an app refuses the
/// changes it does not take.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct MembershipArgs {
    /// Extra worker nodes marked standby, named after the starting ones: the job starts
    /// without them and each joins when started (by `--scale`), at the app's next
    /// boundary (a clock, an iteration, a rotation or a pass).
    #[arg(long, default_value_t = 0)]
    pub standby_workers: usize,
    /// Extra shard nodes marked standby, named after the starting ones: each joins when
    /// started (by `--scale`) and takes its share of the model at the app's next boundary.
    /// Only for apps whose shards change (ps-mf, ps-lr, ps-lda, p3).
    #[arg(long, default_value_t = 0)]
    pub standby_shards: usize,
    /// A membership plan (`[cluster] scale`), e.g. `at=2s add w2; at=4s remove w0`: the
    /// standby nodes start and members drain and leave at those times (nodes by name or
    /// role; the names are the app's: `w2` and `s2`, or `worker-2` and `shard-2` for ps-*).
    #[arg(long, value_name = "PLAN")]
    pub scale: Option<String>,
}

/// One change of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScaleChange {
    /// Start a standby node: by node name, or a role (its first standby node not yet added).
    Add(String),
    /// Ask a member to drain and leave: by node name, or a role (its last member).
    Remove(String),
}

/// A change and when, after the cluster formed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleStep {
    /// When, after the cluster formed.
    pub at: Duration,
    /// What.
    pub change: ScaleChange,
}

/// A membership plan: steps in time order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScalePlan {
    /// The steps, earliest first.
    pub steps: Vec<ScaleStep>,
}

impl ScalePlan {
    /// Reads `at=<duration> add|remove <node or role>` steps separated by `;`.
    pub fn parse(text: &str) -> Result<ScalePlan, NodeError> {
        let fail = |why: String| NodeError::Config(format!("scale plan {text:?}: {why}"));
        let mut steps = Vec::new();
        for step in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let words: Vec<&str> = step.split_whitespace().collect();
            let [at, verb, target] = words[..] else {
                return Err(fail(format!(
                    "step {step:?} is not `at=<time> add|remove <node or role>`"
                )));
            };
            let at = at
                .strip_prefix("at=")
                .ok_or_else(|| fail(format!("step {step:?} does not start with at=<time>")))?;
            let at = humantime::parse_duration(at)
                .map_err(|e| fail(format!("step {step:?}: time {at:?}: {e}")))?;
            let change = match verb {
                "add" => ScaleChange::Add(target.to_string()),
                "remove" => ScaleChange::Remove(target.to_string()),
                other => {
                    return Err(fail(format!(
                        "step {step:?}: {other:?} is not add or remove"
                    )));
                }
            };
            steps.push(ScaleStep { at, change });
        }
        steps.sort_by_key(|s| s.at);
        Ok(ScalePlan { steps })
    }

    /// The plan with every role replaced by a node of `settings`: an added node must be
    /// standby and added once; a removed one must be a member by then and not the
    /// coordinator.
    pub fn resolve(&self, settings: &Settings) -> Result<ScalePlan, NodeError> {
        let plan = self.to_string();
        let fail = |why: String| NodeError::Config(format!("scale plan {plan:?}: {why}"));
        let mut members: Vec<&str> = settings
            .nodes
            .iter()
            .filter(|n| !n.standby)
            .map(|n| n.name.as_str())
            .collect();
        let mut added = BTreeSet::new();
        let mut steps = Vec::new();
        let has_role = |node: &str, role: &str| {
            let spec = settings.nodes.iter().find(|n| n.name == node);
            spec.is_some_and(|n| n.roles.iter().any(|r| r == role))
        };
        for step in &self.steps {
            let change = match &step.change {
                ScaleChange::Add(target) => {
                    let node = settings
                        .nodes
                        .iter()
                        .filter(|n| n.standby && !added.contains(n.name.as_str()))
                        .find(|n| n.name == *target || n.roles.iter().any(|r| r == target))
                        .map(|n| n.name.as_str())
                        .ok_or_else(|| {
                            fail(format!(
                                "add {target}: no standby node of that name or role is left to start"
                            ))
                        })?;
                    added.insert(node);
                    members.push(node);
                    ScaleChange::Add(node.to_string())
                }
                ScaleChange::Remove(target) => {
                    let node = members
                        .iter()
                        .rposition(|n| n == target || has_role(n, target))
                        .map(|i| members.remove(i))
                        .ok_or_else(|| {
                            fail(format!("remove {target}: no member of that name or role"))
                        })?;
                    if node == settings.coordinator_name() {
                        return Err(fail(format!(
                            "remove {node}: the coordinator's node cannot leave"
                        )));
                    }
                    ScaleChange::Remove(node.to_string())
                }
            };
            steps.push(ScaleStep {
                at: step.at,
                change,
            });
        }
        Ok(ScalePlan { steps })
    }

    /// The standby nodes this plan starts, with when.
    pub fn added(&self) -> impl Iterator<Item = (Duration, &str)> {
        self.steps.iter().filter_map(|s| match &s.change {
            ScaleChange::Add(n) => Some((s.at, n.as_str())),
            ScaleChange::Remove(_) => None,
        })
    }

    /// The nodes this plan asks to leave, with when.
    pub fn removed(&self) -> impl Iterator<Item = (Duration, &str)> {
        self.steps.iter().filter_map(|s| match &s.change {
            ScaleChange::Remove(n) => Some((s.at, n.as_str())),
            ScaleChange::Add(_) => None,
        })
    }
}

impl std::fmt::Display for ScalePlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|s| {
                let (verb, target) = match &s.change {
                    ScaleChange::Add(t) => ("add", t),
                    ScaleChange::Remove(t) => ("remove", t),
                };
                format!("at={} {verb} {target}", humantime::format_duration(s.at))
            })
            .collect();
        f.write_str(&steps.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::NodeSpec;

    fn settings() -> Settings {
        let node = |name: &str, role: &str, standby: bool| NodeSpec {
            name: name.into(),
            roles: vec![role.into()],
            standby,
            ..Default::default()
        };
        Settings {
            nodes: vec![
                node("boss", "dealer", false),
                node("w0", "worker", false),
                node("w1", "worker", false),
                node("w2", "worker", true),
                node("w3", "worker", true),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn a_plan_reads_steps_in_time_order_and_resolves_roles_to_nodes() {
        let plan = ScalePlan::parse("at=1.5s remove worker; at=500ms add worker; ").unwrap();
        assert_eq!(plan.steps.len(), 2);
        assert_eq!(plan.steps[0].at, Duration::from_millis(500));
        let resolved = plan.resolve(&settings()).unwrap();
        assert_eq!(
            resolved.added().collect::<Vec<_>>(),
            [(Duration::from_millis(500), "w2")]
        );
        // The last member with the role: the one just added.
        assert_eq!(
            resolved.removed().collect::<Vec<_>>(),
            [(Duration::from_millis(1500), "w2")]
        );
        assert_eq!(
            resolved.to_string(),
            "at=500ms add w2; at=1s 500ms remove w2"
        );
        let named = ScalePlan::parse("at=1s add w3; at=2s remove w0").unwrap();
        let named = named.resolve(&settings()).unwrap();
        assert_eq!(named.added().next(), Some((Duration::from_secs(1), "w3")));
        assert_eq!(named.removed().next(), Some((Duration::from_secs(2), "w0")));
    }

    #[test]
    fn a_plan_that_does_not_fit_is_refused_naming_the_step() {
        let why = |plan: &str| {
            let parsed = ScalePlan::parse(plan);
            let resolved = parsed.and_then(|p| p.resolve(&settings()));
            resolved.unwrap_err().to_string()
        };
        assert!(why("at=1s add").contains("is not `at=<time>"));
        assert!(why("1s add w2").contains("does not start with at="));
        assert!(why("at=soon add w2").contains("time \"soon\""));
        assert!(why("at=1s grow w2").contains("is not add or remove"));
        assert!(why("at=1s add w1").contains("no standby node"));
        assert!(why("at=1s add w2; at=2s add w2").contains("no standby node"));
        assert!(why("at=1s remove w3").contains("no member"));
        assert!(why("at=1s remove boss").contains("coordinator"));
        assert!(why("at=1s remove w0; at=2s remove w0").contains("no member"));
    }
}
