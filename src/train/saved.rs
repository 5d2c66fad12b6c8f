//! `petrel eval APP` and `petrel predict APP`: a saved model ([`MODEL_FILE`]) on a data file.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::CliError;
use petrel_ml::MlError;
use petrel_ml::data::{load_bow, load_labelled_ratings, load_libsvm};
use petrel_ml::model::{
    Figures, MODEL_FILE, ModelParams, NetworkModel, SavedModel, Unseen, require_some,
    unseen_features,
};
use rand::SeedableRng;
use rand::rngs::StdRng;

/// An app whose model `petrel eval` and `petrel predict` read.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelApp {
    /// Lasso (STRADS).
    Lasso,
    /// Sparse binary logistic regression (STRADS).
    Logistic,
    /// Matrix factorisation (STRADS).
    #[value(name = "strads-mf")]
    StradsMf,
    /// LDA (STRADS).
    Lda,
    /// Matrix factorisation (parameter server).
    #[value(name = "ps-mf")]
    PsMf,
    /// Multinomial logistic regression (parameter server).
    #[value(name = "ps-lr")]
    PsLr,
    /// LDA (parameter server).
    #[value(name = "ps-lda")]
    PsLda,
    /// A deep network trained with P3 (`petrel train p3`).
    P3,
}

impl ModelApp {
    /// The `petrel train` subcommand (the model file's `app`), as the command line names it.
    pub fn name(self) -> String {
        let value = clap::ValueEnum::to_possible_value(&self);
        value.map_or_else(String::new, |v| v.get_name().to_string())
    }
}

/// The flags `eval` and `predict` share.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// The app that trained the model.
    #[arg(value_enum)]
    pub app: ModelApp,
    /// The model: a `petrel train` output directory (its `petrel-model.json`) or the file.
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// LDA: fold-in Gibbs sweeps per document.
    #[arg(long, default_value_t = petrel_ml::model::HELDOUT_FOLD_IN_SWEEPS)]
    pub iterations: usize,
    /// LDA: the fold-in sampler's seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `petrel eval APP --model DIR --data FILE`.
#[derive(clap::Args, Debug, Clone)]
pub struct EvalArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Held-out data in the app's training format (with labels or ratings).
    #[arg(long)]
    pub data: PathBuf,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `petrel predict APP --model DIR --data FILE`.
#[derive(clap::Args, Debug, Clone)]
pub struct PredictArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Rows, `user item` pairs or documents to predict (labels and ratings ignored). With
    /// --recommend: the user's known ratings, left out of the recommendations.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// MF: recommend items for this user (id as in the training file).
    #[arg(long, value_name = "USER")]
    pub recommend: Option<String>,
    /// MF: how many items --recommend lists.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Write the predictions (TSV with a header) here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Loads the model and checks its parameters are of the app's kind.
fn load_model(args: &ModelArgs) -> Result<SavedModel, CliError> {
    let model = match args.app {
        // Safetensors, or the JSON of earlier versions.
        ModelApp::P3 => petrel_p3::model_file::read(&args.model)?,
        _ => SavedModel::load(&args.model, &args.app.name())?,
    };
    let path = || {
        if args.app == ModelApp::P3 {
            petrel_p3::model_file::resolve(&args.model)
        } else if args.model.is_dir() {
            args.model.join(MODEL_FILE)
        } else {
            args.model.clone()
        }
    };
    let kind_ok = matches!(
        (args.app, &model.params),
        (ModelApp::Lasso | ModelApp::Logistic, ModelParams::Linear(_))
            | (ModelApp::PsLr, ModelParams::Softmax(_))
            | (ModelApp::StradsMf | ModelApp::PsMf, ModelParams::Factors(_))
            | (ModelApp::Lda | ModelApp::PsLda, ModelParams::Topics(_))
            | (ModelApp::P3, ModelParams::Network(_))
    );
    if !kind_ok {
        return Err(MlError::InconsistentModel {
            path: path(),
            reason: format!(
                "its parameters are not those of a {} model",
                args.app.name()
            ),
        }
        .into());
    }
    if let ModelParams::Network(network) = &model.params {
        petrel_p3::models::architecture::check_model_file(network, &path())?;
    }
    Ok(model)
}

/// Test loss and accuracy of a P3 network on `data`.
fn evaluate_network(m: &NetworkModel, data: &Path) -> Result<Figures, CliError> {
    let examples = network_data(m, data)?;
    let s = petrel_p3::roles::evaluate_network(m, &examples)?;
    Ok(vec![
        ("examples", examples.len() as f64),
        ("loss", f64::from(s.loss)),
        ("accuracy", f64::from(s.accuracy)),
    ])
}

/// The examples of `data` for a P3 model (a plain path is a CIFAR-10 binary file).
fn network_data(m: &NetworkModel, data: &Path) -> Result<petrel_ml::dnn::data::Dataset, CliError> {
    let text = data.to_string_lossy();
    let spec = if text.starts_with("cifar:") || text.starts_with("idx:") {
        text.into_owned()
    } else {
        format!("cifar:{text}")
    };
    let spec = petrel_p3::roles::DataSpec::parse("--data", &spec)?;
    let (examples, _) = petrel_p3::roles::load_data(&spec, None, 0)?;
    if examples.x.shape()[1..] != m.input[..] {
        return Err(CliError::Usage(format!(
            "{}: examples of shape {:?}, the model takes {:?}",
            data.display(),
            &examples.x.shape()[1..],
            m.input
        )));
    }
    Ok(examples)
}

/// `petrel eval`: prints the figures (a line, then a JSON line), and writes `--out`.
pub fn eval_command(args: EvalArgs) -> Result<(), CliError> {
    let model = load_model(&args.model)?;
    let mut unseen = Unseen::default();
    let figures = match &model.params {
        ModelParams::Network(m) => evaluate_network(m, &args.data)?,
        _ => {
            let (figures, u) =
                model.evaluate_file(&args.data, args.model.iterations, args.model.seed)?;
            unseen = u;
            figures
        }
    };
    note_unseen(&unseen, &args.data);
    let text: Vec<String> = figures
        .iter()
        .map(|(name, v)| format!("{name} {}", short_figure(*v)))
        .collect();
    let line = format!(
        "{} model {} on {}: {}\n",
        model.app,
        args.model.model.display(),
        args.data.display(),
        text.join(", ")
    );
    let json = serde_json::json!({
        "app": model.app,
        "model": args.model.model,
        "data": args.data,
        "figures": figures.iter().map(|(k, v)| (k.to_string(), finite_json(*v))).collect::<serde_json::Map<_, _>>(),
    });
    to_stdout(format!("{line}{json}\n").as_bytes())?;
    if let Some(path) = &args.out {
        let mut bytes = serde_json::to_vec_pretty(&json)
            .map_err(|e| CliError::Usage(format!("encoding the figures: {e}")))?;
        bytes.push(b'\n');
        petrel_ml::job::write_atomic(path, &bytes).map_err(CliError::io(path))?;
    }
    Ok(())
}

/// A figure as JSON (`null` for NaN, e.g. R^2 of constant labels).
fn finite_json(v: f64) -> serde_json::Value {
    serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// Counts print as integers, other figures with 6 decimals.
pub fn short_figure(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.6}")
    }
}

/// `petrel predict`: the predictions as TSV with a header.
pub fn predict_command(args: PredictArgs) -> Result<(), CliError> {
    let model = load_model(&args.model)?;
    let need_data = || {
        args.data.clone().ok_or_else(|| {
            CliError::Usage(format!(
                "petrel predict {} needs --data FILE",
                args.model.app.name()
            ))
        })
    };
    if args.recommend.is_some() && !matches!(model.params, ModelParams::Factors(_)) {
        return Err(CliError::Usage(
            "--recommend applies to strads-mf and ps-mf models".into(),
        ));
    }
    let mut out = String::new();
    match &model.params {
        ModelParams::Linear(m) => {
            let path = need_data()?;
            let data = load_libsvm(&path)?;
            require_some(data.rows.len(), "rows", &path)?;
            note_unseen(&unseen_features(&data, m.coefficients.len()), &path);
            match m.task {
                petrel_ml::model::LinearTask::Regression => {
                    out.push_str("row\tprediction\n");
                    for (r, x) in data.rows.iter().enumerate() {
                        out.push_str(&format!("{}\t{}\n", r + 1, m.predict(x)));
                    }
                }
                classification => {
                    // `positive` is 1 for the positive class (training labels > 0), else 0.
                    let (name, threshold) = match classification {
                        petrel_ml::model::LinearTask::BinaryClassification => ("probability", 0.5),
                        _ => ("margin", 0.0),
                    };
                    out.push_str(&format!("row\tpositive\t{name}\n"));
                    for (r, x) in data.rows.iter().enumerate() {
                        let p = m.predict(x);
                        out.push_str(&format!("{}\t{}\t{p}\n", r + 1, u8::from(p >= threshold)));
                    }
                }
            }
        }
        ModelParams::Softmax(m) => {
            let path = need_data()?;
            let data = load_libsvm(&path)?;
            require_some(data.rows.len(), "rows", &path)?;
            note_unseen(&unseen_features(&data, m.n_features()), &path);
            let classes = m.class_labels.iter().map(|l| format!("p_{l}"));
            tsv_line(&mut out, "row\tlabel", classes);
            for (r, x) in data.rows.iter().enumerate() {
                let (label, p) = m.predict(x);
                tsv_line(
                    &mut out,
                    format!("{}\t{label}", r + 1),
                    p.iter().map(|v| v.to_string()),
                );
            }
        }
        ModelParams::Factors(m) => match &args.recommend {
            Some(user) => {
                let rated: HashSet<String> = match &args.data {
                    Some(path) => load_labelled_ratings(path)?
                        .into_iter()
                        .filter(|(u, _, _)| u == user)
                        .map(|(_, i, _)| i)
                        .collect(),
                    None => HashSet::new(),
                };
                out.push_str("user\trank\titem\tprediction\n");
                for (rank, (item, score)) in
                    m.recommend(user, args.top, &rated)?.into_iter().enumerate()
                {
                    out.push_str(&format!("{user}\t{}\t{item}\t{score}\n", rank + 1));
                }
            }
            None => {
                let path = need_data()?;
                let pairs = load_labelled_ratings(&path)?;
                require_some(pairs.len(), "pairs", &path)?;
                note_unseen(&m.unseen(&pairs), &path);
                let index = m.index();
                out.push_str("user\titem\tprediction\n");
                for (user, item, _) in &pairs {
                    let p = m.predict(&index, user, item);
                    out.push_str(&format!("{user}\t{item}\t{p}\n"));
                }
            }
        },
        ModelParams::Network(m) => {
            let path = need_data()?;
            let examples = network_data(m, &path)?;
            let probs = petrel_p3::roles::predict_network(m, &examples)?;
            tsv_line(
                &mut out,
                "example\tclass",
                (0..m.classes).map(|k| format!("p_{k}")),
            );
            for (i, p) in probs.iter().enumerate() {
                let class = (0..p.len())
                    .max_by(|&a, &b| p[a].total_cmp(&p[b]))
                    .unwrap_or(0);
                let cells = format!("{}\t{class}", i + 1);
                tsv_line(&mut out, cells, p.iter().map(|v| format!("{v:.6}")));
            }
        }
        ModelParams::Topics(m) => {
            let path = need_data()?;
            let (corpus, unseen) = m.known_words(load_bow(&path, None)?);
            require_some(corpus.docs.len(), "documents", &path)?;
            note_unseen(&unseen, &path);
            let mut rng = StdRng::seed_from_u64(args.model.seed);
            tsv_line(
                &mut out,
                "doc",
                (0..m.n_topics()).map(|k| format!("topic_{k}")),
            );
            for (d, doc) in corpus.docs.iter().enumerate() {
                let mix = m.fold_in(doc, args.model.iterations, &mut rng);
                tsv_line(&mut out, d + 1, mix.iter().map(|v| format!("{v:.6}")));
            }
        }
    }
    match &args.out {
        Some(path) => {
            petrel_ml::job::write_atomic(path, out.as_bytes()).map_err(CliError::io(path))?;
            println!("wrote {}", path.display());
        }
        None => to_stdout(out.as_bytes())?,
    }
    Ok(())
}

/// Says on standard error, in one line, what of `data` the model never saw and ignored.
fn note_unseen(unseen: &Unseen, data: &Path) {
    if let Some(note) = unseen.note(data) {
        eprintln!("note: {note}");
    }
}

/// Appends one TSV line: `first` (one or more cells), then each of `more`.
fn tsv_line(out: &mut String, first: impl std::fmt::Display, more: impl Iterator<Item = String>) {
    out.push_str(&first.to_string());
    for cell in more {
        out.push('\t');
        out.push_str(&cell);
    }
    out.push('\n');
}

/// Writes to standard output; a reader that stopped early (`| head`) is not an error.
fn to_stdout(bytes: &[u8]) -> Result<(), CliError> {
    match std::io::stdout().lock().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::io(Path::new("-"))(e))
        }
        _ => Ok(()),
    }
}
