//! One job schema per app: `[app.<section>]` of a TOML file, then `PETREL_APP__*`
//! variables, then the flags given; unknown keys and other apps' sections are refused.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::CliError;

/// The top-level tables a job file may hold.
const TOP_LEVEL: [&str; 4] = ["app", "cluster", "nodes", "net"];

/// `[app.<section>]` of `file`, overridden by `PETREL_APP__<SECTION>__*`, then by the
/// flags whose clap ids are in `given` (a nested field's: its dotted path or unique name).
pub fn resolve_job<C>(
    section: &'static str,
    file: Option<&Path>,
    flags: &C,
    given: &BTreeSet<String>,
) -> Result<C, CliError>
where
    C: Serialize + DeserializeOwned,
{
    let origin = file
        .map(|f| format!(" ({})", f.display()))
        .unwrap_or_default();
    let mut job = file_and_env_section(section, file)?;
    let flags = serde_json::to_value(flags).map_err(CliError::Flags)?;
    for id in given {
        // A null is a setting the flag does not fill (`--out` of the STRADS apps).
        if let Some((path, value)) = flag_value(&flags, id).filter(|(_, v)| !v.is_null()) {
            set_path(&mut job, &path, value);
        }
    }
    // Decoded through TOML, whose errors name the key of a value of the wrong type.
    let table = toml::Value::try_from(Value::Object(job)).map_err(CliError::Encode)?;
    table.try_into().map_err(|source| CliError::Section {
        section,
        origin,
        source: Box::new(source),
    })
}

/// The section from the file and the environment, as `petrel run` reads them.
fn file_and_env_section(
    section: &'static str,
    file: Option<&Path>,
) -> Result<Map<String, Value>, CliError> {
    let parse = |origin: String| {
        move |source| CliError::Parse {
            origin,
            source: Box::new(source),
        }
    };
    let toml = |f: &Path| config::File::from(f).format(config::FileFormat::Toml);
    let mut builder = config::Config::builder();
    if let Some(f) = file {
        // Checked alone: the environment may hold other PETREL_* variables.
        let tables: Value = config::Config::builder()
            .add_source(toml(f))
            .build()
            .and_then(config::Config::try_deserialize)
            .map_err(parse(f.display().to_string()))?;
        check_tables(section, f, &tables)?;
        builder = builder.add_source(toml(f));
    }
    let env = config::Environment::with_prefix("PETREL")
        .prefix_separator("_")
        .separator("__")
        .try_parsing(true);
    let all: Value = builder
        .add_source(env)
        .build()
        .and_then(config::Config::try_deserialize)
        .map_err(parse("environment".into()))?;
    Ok(match all.get("app").and_then(|a| a.get(section)) {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    })
}

fn check_tables(section: &'static str, file: &Path, tables: &Value) -> Result<(), CliError> {
    let Some(top) = tables.as_object() else {
        return Ok(());
    };
    if let Some(key) = top.keys().find(|k| !TOP_LEVEL.contains(&k.as_str())) {
        return Err(CliError::UnknownTable {
            file: file.to_path_buf(),
            key: key.clone(),
            section,
        });
    }
    if let Some(apps) = top.get("app").and_then(Value::as_object)
        && let Some(other) = apps.keys().find(|k| k.as_str() != section)
    {
        return Err(CliError::OtherApp {
            file: file.to_path_buf(),
            found: other.clone(),
            section,
        });
    }
    Ok(())
}

/// The path and value of flag `id` in the flags' settings, if the flag is a setting.
fn flag_value(flags: &Value, id: &str) -> Option<(Vec<String>, Value)> {
    let path: Vec<String> = id.split('.').map(str::to_string).collect();
    let mut at = flags;
    for key in &path {
        match at.get(key) {
            Some(v) => at = v,
            None => return nested_unique(flags, id),
        }
    }
    Some((path, at.clone()))
}

/// A field `id` of exactly one nested table (clap flattens nested structs by field name).
fn nested_unique(flags: &Value, id: &str) -> Option<(Vec<String>, Value)> {
    let top = flags.as_object()?;
    let mut found = top.iter().filter_map(|(table, v)| {
        v.as_object()
            .and_then(|m| m.get(id))
            .map(|value| (vec![table.clone(), id.to_string()], value.clone()))
    });
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

fn set_path(map: &mut Map<String, Value>, path: &[String], value: Value) {
    match path {
        [] => {}
        [last] => {
            map.insert(last.clone(), value);
        }
        [first, rest @ ..] => {
            let entry = map
                .entry(first.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            if let Value::Object(inner) = entry {
                set_path(inner, rest, value);
            }
        }
    }
}

/// Creates `dir`, proves it writable and returns it absolute, before any node starts.
pub fn prepare_out_dir(dir: &Path) -> Result<PathBuf, CliError> {
    let unusable = |source| CliError::OutDirUnusable {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(unusable)?;
    let dir = std::fs::canonicalize(dir).map_err(unusable)?;
    tempfile::Builder::new()
        .prefix(".petrel-write-check")
        .tempfile_in(&dir)
        .map_err(unusable)?;
    Ok(dir)
}

/// The clap ids of the arguments given on the command line (not defaults).
pub fn given_ids(matches: &clap::ArgMatches) -> BTreeSet<String> {
    matches
        .ids()
        .filter(|id| {
            matches.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine)
        })
        .map(|id| id.as_str().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
    #[serde(default, deny_unknown_fields)]
    struct Inner {
        #[arg(long = "inner-seed", id = "inner.seed", default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value_t = 5)]
        size: usize,
    }
    impl Default for Inner {
        fn default() -> Self {
            Inner { seed: 1, size: 5 }
        }
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
    #[serde(default, deny_unknown_fields)]
    struct Job {
        #[arg(long, default_value_t = 0.1)]
        rate: f64,
        #[arg(long, default_value_t = 3)]
        rank: u32,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        inner: Inner,
    }
    impl Default for Job {
        fn default() -> Self {
            Job {
                rate: 0.1,
                rank: 3,
                seed: 0,
                inner: Inner::default(),
            }
        }
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        job: Job,
    }

    fn parse(args: &[&str]) -> (Job, BTreeSet<String>) {
        use clap::{CommandFactory, FromArgMatches};
        let m = Cli::command()
            .try_get_matches_from(std::iter::once("t").chain(args.iter().copied()))
            .unwrap();
        (Cli::from_arg_matches(&m).unwrap().job, given_ids(&m))
    }

    #[test]
    fn flags_override_the_file_and_nested_ids_find_their_table() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("job.toml");
        std::fs::write(
            &f,
            "[app.t]\nrate = 0.5\nrank = 7\n[app.t.inner]\nseed = 9\nsize = 2\n",
        )
        .unwrap();
        let (flags, given) = parse(&["--rank", "4", "--inner-seed", "3", "--size", "8"]);
        let job: Job = resolve_job("t", Some(&f), &flags, &given).unwrap();
        assert_eq!(job.rate, 0.5, "the file's value, no flag given");
        assert_eq!(job.rank, 4, "the flag beats the file");
        assert_eq!(job.inner.seed, 3, "dotted id");
        assert_eq!(job.inner.size, 8, "unique nested name");
        assert_eq!(job.seed, 0, "default: neither file nor flag");
    }

    #[test]
    fn without_a_file_the_flags_and_defaults_are_the_job() {
        let (flags, given) = parse(&["--rate", "0.2"]);
        let job: Job = resolve_job("t2", None, &flags, &given).unwrap();
        assert_eq!(
            job,
            Job {
                rate: 0.2,
                ..Job::default()
            }
        );
    }

    #[test]
    fn unknown_keys_and_tables_are_refused_with_the_valid_keys() {
        let dir = tempfile::tempdir().unwrap();
        let (flags, given) = parse(&[]);
        for (text, needle) in [
            ("[app.t]\nrankk = 7\n", "rankk"),
            ("[app.t]\nrankk = 7\n", "rate"),
            ("[app.t.inner]\nsede = 1\n", "sede"),
            ("[clusterr]\nname = 'x'\n", "clusterr"),
            ("[app.mf]\nrank = 7\n", "app.mf"),
            ("[app.t]\nrank = 'seven'\n", "rank"),
        ] {
            let f = dir.path().join("bad.toml");
            std::fs::write(&f, text).unwrap();
            let e = resolve_job::<Job>("t", Some(&f), &flags, &given).unwrap_err();
            let text = petrel_actors::error_chain(&e);
            assert!(text.contains(needle), "{text} lacks {needle}");
        }
    }

    #[test]
    fn the_out_dir_is_created_and_must_be_writable() {
        let dir = tempfile::tempdir().unwrap();
        let out = prepare_out_dir(&dir.path().join("a/b")).unwrap();
        assert!(out.is_absolute() && out.is_dir());
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0, "probe removed");
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(prepare_out_dir(&file.join("sub")).is_err());
        assert!(prepare_out_dir(Path::new("/proc/petrel-out")).is_err());
    }
}
