//! [`Mode`]: how gradients and parameters are scheduled (sequential, fifo or p3). A choice
//! read from flags (the CLI parser's impl is in [`crate::kit`], out of the core) and from
//! TOML/JSON (serde), rejected when read with the valid values named.

use crate::core::error::P3CoreError;

/// How gradients and parameters are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// No overlap (see [`Mode::help`]); also accepted as `seq`.
    Sequential,
    /// Whole-layer transfers in the order gradients are produced (see [`Mode::help`]).
    Fifo,
    /// Sliced, layer-priority transfers (see [`Mode::help`]).
    #[default]
    P3,
}

impl Mode {
    /// The three modes, in the order benches report them.
    pub const ALL: [Mode; 3] = [Mode::Sequential, Mode::Fifo, Mode::P3];

    /// Parses `sequential` (or `seq`), `fifo` or `p3`, case-insensitively; anything else is
    /// [`P3CoreError::UnknownMode`], which names the valid values.
    pub fn parse(s: &str) -> Result<Mode, P3CoreError> {
        let lower = s.to_ascii_lowercase();
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == lower || (*m == Mode::Sequential && lower == "seq"))
            .ok_or_else(|| P3CoreError::UnknownMode {
                value: s.to_string(),
            })
    }

    /// What the mode does and costs, as `--mode`'s help shows it.
    pub fn help(self) -> &'static str {
        match self {
            Mode::Sequential => {
                "No overlap: all gradients are sent after the whole backward pass and the next \
                 forward pass starts after the whole model is back. `T ~= C + M`, plus up to one \
                 largest-layer transfer: a server can return a layer only after it has received \
                 all of it (store-and-forward per transfer unit), so the pull of the biggest \
                 layer cannot overlap its own push"
            }
            Mode::Fifo => {
                "Whole-layer transfers in the order gradients are produced (MXNet/TF default): \
                 overlaps communication with backward, but the next forward pass waits for layer \
                 0, which is sent last. `T >= T_fwd + max(T_bwd, M)`, plus the same \
                 store-and-forward penalty as `Sequential`"
            }
            Mode::P3 => "Sliced, layer-priority transfers with preemption at slice boundaries",
        }
    }

    /// Lower-case name, as accepted by [`Mode::parse`].
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sequential => "sequential",
            Mode::Fifo => "fifo",
            Mode::P3 => "p3",
        }
    }

    /// Whether a layer's gradient is pushed as soon as backprop produced it (`fifo`, `p3`)
    /// rather than after the whole backward pass (`sequential`).
    pub fn pushes_during_backward(self) -> bool {
        !matches!(self, Mode::Sequential)
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = P3CoreError;
    fn from_str(s: &str) -> Result<Self, P3CoreError> {
        Mode::parse(s)
    }
}

// Read through `parse`, so a bad value in a config file names the valid ones.
impl<'de> serde::Deserialize<'de> for Mode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Mode::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_rejects_others_naming_the_valid_values() {
        assert_eq!(Mode::parse("P3").unwrap(), Mode::P3);
        assert_eq!(Mode::parse("seq").unwrap(), Mode::Sequential);
        assert_eq!("fifo".parse::<Mode>().unwrap(), Mode::Fifo);
        let e = Mode::parse("x").unwrap_err().to_string();
        assert!(e.contains("sequential, fifo, p3"), "{e}");
        assert!(!Mode::Sequential.pushes_during_backward());
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.name()).unwrap(), m);
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.name()));
            assert_eq!(serde_json::from_str::<Mode>(&json).unwrap(), m);
        }
        let e = serde_json::from_str::<Mode>("\"bogus\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("valid values"), "{e}");
    }
}
