//! `placer bench seeds`: the seeds' simulated figures that README.md, docs/seeds.md and
//! docs/smt.md quote (issue 51), each labelled with what it rests on; seed 003 over seeds
//! 1..=N. Prints the docs' blocks, or with `--write` puts them into the docs (the test
//! `seed_figures` fails when a doc differs from what this computes).

use anyhow::{Context, Result};
use placer_sim::seed_figures::{self, Figures};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seed 003: seeds 1..=N per row.
    #[arg(long, default_value_t = 40)]
    pub seeds: u64,
    /// Only these seeds' figures (comma-separated: 000, 001, 003).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Seed 003 on this many threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Seed 003's per-seed values from this file (docs/seed-003-seeds.md) instead of
    /// running them: re-renders the summaries.
    #[arg(long, value_name = "FILE")]
    pub per_seed: Option<PathBuf>,
    /// Rewrite the blocks in the docs under this repository root instead of printing them.
    #[arg(long, value_name = "REPO")]
    pub write: Option<PathBuf>,
    /// Print JSON (every figure, seed 003 per seed).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> Result<()> {
    for s in &args.only {
        if !["000", "001", "003"].contains(&s.as_str()) {
            anyhow::bail!("--only takes 000, 001, 003, not {s:?}");
        }
    }
    let want = |s: &str| args.only.is_empty() || args.only.iter().any(|o| o == s);
    let progress = crate::common::Progress::start("bench seeds", "seed 000");
    let err = |e: String| anyhow::anyhow!(e);
    let mut f = Figures::default();
    if want("000") {
        f.s000 = Some(seed_figures::run_000().map_err(err)?);
    }
    if want("001") {
        progress.phase("seed 001");
        f.s001 = Some(seed_figures::run_001("seed-001").map_err(err)?);
    }
    if want("003") {
        f.s003 = Some(match &args.per_seed {
            Some(p) => {
                let text = crate::common::read_input(p)?;
                let block = seed_figures::block(&text, "seed-003-seeds")
                    .ok_or_else(|| anyhow::anyhow!("{}: no seed-003-seeds block", p.display()))?;
                seed_figures::parse_003_per_seed(block).map_err(err)?
            }
            None => {
                let say = |l: &str| progress.phase(&format!("seed 003: {l}"));
                seed_figures::run_003(args.seeds, args.threads, &say).map_err(err)?
            }
        });
    }
    drop(progress);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&f)?);
        return Ok(());
    }
    for (file, name, text) in seed_figures::doc_blocks(&f).map_err(err)? {
        match &args.write {
            Some(root) => {
                let path = root.join(file);
                let doc = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let new = seed_figures::replace_block(&doc, name, &text)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                std::fs::write(&path, new)
                    .with_context(|| format!("writing {}", path.display()))?;
                outln!("{file}: block {name} written");
            }
            None => {
                outln!("<!-- {file}: {name} -->");
                out!("{text}");
                outln!();
            }
        }
    }
    Ok(())
}
