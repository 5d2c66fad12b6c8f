//! `ValueEnum` impls of the cores' choice enums (`--consistency`, `--rule`, `--managed`,
//! `--server-push`), kept here so clap stays out of the sans-I/O core.

use clap::ValueEnum;
use clap::builder::PossibleValue;

use crate::core::managed::SendPolicy;
use crate::core::rules::ServerRule;
use crate::core::types::ConsistencyModel;

/// `impl ValueEnum for $ty`: each variant's name on the command line and its help.
macro_rules! value_enum {
    ($ty:ident { $($variant:ident = $name:literal: $help:literal),+ $(,)? }) => {
        impl ValueEnum for $ty {
            fn value_variants<'a>() -> &'a [Self] {
                &[$($ty::$variant),+]
            }

            fn to_possible_value(&self) -> Option<PossibleValue> {
                Some(match self {
                    $($ty::$variant => PossibleValue::new($name).help($help)),+
                })
            }
        }
    };
}

value_enum!(ConsistencyModel {
    Bsp = "bsp": "Bulk synchronous parallel",
    Ssp = "ssp": "Stale synchronous parallel (lazy pull)",
    Essp = "essp": "Eager SSP (shards push subscribed rows)",
    Async = "async": "No staleness bound",
});

value_enum!(SendPolicy {
    Fifo = "fifo": "Oldest first (first `Inc` into the oplog)",
    RelativeMagnitude = "relative-magnitude": "Largest `|delta|_1 / (|value|_1 + eps)` first, ties oldest first",
});

value_enum!(ServerRule {
    Sgd = "sgd": "`x -= alpha g` (fixed step)",
    Adagrad = "adagrad": "`x -= alpha g / sqrt(sum g^2)`",
    AdaRevision = "adarevision": "[`AdaRevision`]: Adagrad revised for the updates a stale gradient missed",
});
