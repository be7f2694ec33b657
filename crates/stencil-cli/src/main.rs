//! `stencil`: the command-line tool.
//!
//! - `stencil generate`: stream a completion for a prompt (chat template applied).
//! - `stencil convert`: write a GGUF as a Hugging Face safetensors directory.
//! - `stencil bench`: prompt tok/s and decode ms/token for a model; `stencil bench maskbench`:
//!   constraint compile and mask times on MaskBench data.
//! - `stencil serve`: the OpenAI-compatible server; `stencil chat --url`: a streaming client.
//! - `stencil batch`: many chat requests from JSONL, each with its own constraint or tools.
//! - `stencil test-suite`: the JSON Schema Test Suite, token by token.

mod batch;
mod bench;
mod chat;
mod conformance;
mod generate;
mod maskbench;
mod serve;
mod test_suite;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use stencil_runtime::loader::{self, LoadOptions, LoadedModel};
use stencil_runtime::models::quantized_llama::WeightFormat;

#[derive(Parser)]
#[command(
    name = "stencil",
    version,
    about = "Grammar-constrained decoding on local models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text for a prompt, streamed to stdout.
    Generate(generate::GenerateArgs),
    /// Convert a llama GGUF into a Hugging Face-layout safetensors directory.
    Convert {
        /// Input GGUF file.
        gguf: std::path::PathBuf,
        /// Output directory.
        out: std::path::PathBuf,
        /// f32, f16 or bf16.
        #[arg(long, default_value = "f32")]
        dtype: String,
    },
    /// Measure prompt throughput and decode latency (or `bench maskbench`: mask speed).
    Bench(BenchCommand),
    /// Serve the OpenAI-compatible API (chat, completions, models) over HTTP.
    Serve(serve::ServeArgs),
    /// Chat with a server (OpenAI, Anthropic or Ollama API), streaming the answer.
    Chat(chat::ChatArgs),
    /// Run many chat requests from a JSONL file (one result line each, in order).
    Batch(batch::BatchArgs),
    /// Run the JSON Schema Test Suite through the constraint engine, token by token.
    TestSuite(test_suite::TestSuiteArgs),
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
struct BenchCommand {
    #[command(subcommand)]
    sub: Option<BenchSub>,
    #[command(flatten)]
    model: bench::BenchArgs,
}

#[derive(Subcommand, Debug)]
enum BenchSub {
    /// Constraint compile and mask times and correctness on MaskBench files.
    Maskbench(maskbench::MaskBenchArgs),
    /// Masks per second on one compiled constraint: one thread vs several at once.
    Masks(maskbench::MasksArgs),
    /// Decode cost of a constraint: constrained vs unconstrained ms/token, fast-forward.
    Overhead(bench::OverheadArgs),
    /// Concurrent streaming clients against a running server: requests/s and latency.
    Load(serve::LoadArgs),
}

/// Model selection flags shared by commands.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF file, safetensors directory, or hub repo `org/name[:file.gguf]`. Default: the
    /// SmolLM2-135M-Instruct GGUF fetched by scripts/fetch-model.sh.
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// cpu, `cuda[:N]` or metal.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// How GGUF weights are held in memory: `auto` keeps every format with a fast kernel as
    /// stored and re-quantizes Q5_0/Q5_1 to Q8_0; `as-stored` keeps every tensor as stored;
    /// `q8-0` re-quantizes Q4_0/Q4_1/Q5_0/Q5_1 to Q8_0.
    #[arg(long, value_enum, default_value = "auto")]
    pub weights: Weights,
}

/// `--weights` values (see [`WeightFormat`]).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weights {
    Auto,
    AsStored,
    Q8_0,
}

impl ModelArgs {
    /// Resolves and loads the model with a progress bar on stderr.
    pub fn load(&self) -> anyhow::Result<LoadedModel> {
        let files = loader::resolve(self.model.as_deref())?;
        let bar = ProgressBar::new(0).with_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} layers")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_message("loading model");
        let options = LoadOptions {
            device: self.device.clone(),
            weight_format: match self.weights {
                Weights::Auto => WeightFormat::Auto,
                Weights::AsStored => WeightFormat::AsStored,
                Weights::Q8_0 => WeightFormat::Q8_0,
            },
        };
        let loaded = loader::load(&files, &options, |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        });
        bar.finish_and_clear();
        let loaded = loaded?;
        eprintln!(
            "loaded {} in {:.2}s: {}",
            match &loaded.files {
                stencil_runtime::hub::ModelFiles::Gguf(p)
                | stencil_runtime::hub::ModelFiles::Safetensors(p) => p.display().to_string(),
            },
            loaded.load_time.as_secs_f64(),
            loaded.model.describe()
        );
        Ok(loaded)
    }
}

/// Spins of an idle thread of candle's pool before it sleeps (candle's default: 25,000, about
/// a millisecond). Long spins keep the second core busy between decode steps, when sampling,
/// masks and the server's request threads need it: batched serving ran ~5-10% slower with the
/// default. Still long enough to bridge the gaps between the kernels of one forward pass.
const POOL_SPIN_LIMIT: &str = "2000";

fn main() -> ExitCode {
    // Before any thread starts (candle reads it when its pool starts); a user's value wins.
    if std::env::var_os("CANDLE_BARRIER_POOL_SPIN_LIMIT").is_none() {
        std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", POOL_SPIN_LIMIT);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STENCIL_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    // Deeply nested schemas recurse deeply in the compiler: give it room.
    let worker = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || run(cli))
        .expect("spawn worker thread");
    let result = worker
        .join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("internal error (panic)")));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, without repeating a cause whose text an outer
/// message already includes (`{0}`-style wrappers would otherwise print "X: X"). Never a
/// backtrace: these are user errors.
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Generate(args) => generate::run(args),
        Command::Convert { gguf, out, dtype } => (|| {
            let dtype = stencil_runtime::convert::parse_dtype(&dtype)?;
            stencil_runtime::convert::convert_gguf_to_safetensors(&gguf, &out, dtype)?;
            eprintln!("wrote {}", out.display());
            Ok(())
        })(),
        Command::Bench(BenchCommand {
            sub: Some(BenchSub::Maskbench(args)),
            ..
        }) => maskbench::run(args),
        Command::Bench(BenchCommand {
            sub: Some(BenchSub::Masks(args)),
            ..
        }) => maskbench::masks(args),
        Command::Bench(BenchCommand {
            sub: Some(BenchSub::Overhead(args)),
            ..
        }) => bench::overhead(args),
        Command::Bench(BenchCommand {
            sub: Some(BenchSub::Load(args)),
            ..
        }) => serve::load_cmd(args),
        Command::Bench(BenchCommand { model, .. }) => bench::run(model),
        Command::TestSuite(args) => test_suite::run(args),
        Command::Batch(args) => batch::run(args),
        Command::Serve(args) => serve::serve_cmd(args),
        Command::Chat(args) => chat::chat_cmd(args),
    }
}
