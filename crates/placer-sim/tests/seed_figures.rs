//! The seeds' figures in README.md, docs/seeds.md and docs/smt.md are what `placer bench
//! seeds` computes (issue 51): each block between `<!-- NAME:begin -->` markers is
//! recomputed here and compared with the doc's text, so a model change that leaves a stale
//! number fails. Seed 003's 40 seeds per row would take minutes: its summaries are
//! recomputed from the per-seed file (docs/seed-003-seeds.md), and seed 1 of every row is
//! rerun against that file. After a model change: `placer bench seeds --write .`.

use placer_sim::seed_figures::{self as sf, RestsOn};
use std::path::Path;

fn doc_block(file: &str, name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    sf::block(&text, name)
        .unwrap_or_else(|| panic!("{file} has no block {name}"))
        .to_string()
}

fn same(file: &str, name: &str, computed: &str) {
    let doc = doc_block(file, name);
    assert!(
        doc == computed,
        "{file}, block {name}, is stale (rerun `placer bench seeds --write .`):\n--- doc\n{doc}\n--- computed\n{computed}"
    );
}

fn per_seed() -> Vec<sf::PerSeed003> {
    sf::parse_003_per_seed(&doc_block("docs/seed-003-seeds.md", "seed-003-seeds"))
        .unwrap_or_else(|e| panic!("docs/seed-003-seeds.md: {e}"))
}

#[test]
fn seed_003_rows_carry_40_seeds_and_their_first_seed_reruns() {
    let per = per_seed();
    let cases = sf::cases_003();
    let labels: Vec<&str> = per.iter().map(|r| r.label.as_str()).collect();
    let want: Vec<&str> = cases.iter().map(|c| c.label).collect();
    assert_eq!(labels, want, "every row of cases_003, in order");
    for r in &per {
        assert!(
            r.per_app_pct.len() >= 40,
            "{}: {} seeds",
            r.label,
            r.per_app_pct.len()
        );
        assert_eq!(r.per_app_pct.len(), r.makespan_pct.len(), "{}", r.label);
    }
    same("docs/seeds.md", "seed-003", &sf::render_003_table(&per));
    for (c, r) in cases.iter().zip(&per) {
        let got = sf::gains_003(c, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            got,
            (r.per_app_pct[0], r.makespan_pct[0]),
            "{}: seed 1 reruns to (per-app %, makespan %) {got:?}, the per-seed file says \
             otherwise (rerun `placer bench seeds --write .`)",
            c.label
        );
    }
}

#[test]
fn seed_000_001_and_the_readme_table_are_what_the_command_computes() {
    let s000 = sf::run_000().unwrap_or_else(|e| panic!("{e}"));
    same("docs/seeds.md", "seed-000", &sf::render_000(&s000));
    let s001 = sf::run_001("seed-001").unwrap_or_else(|e| panic!("{e}"));
    same("docs/smt.md", "seed-001", &sf::render_001(&s001));
    same(
        "docs/smt.md",
        "seed-001-model",
        &sf::render_001_model().unwrap_or_else(|e| panic!("{e}")),
    );
    let readme = sf::render_readme(&s000, &s001, &per_seed());
    same("README.md", "seeds", &readme);
    // Each seed's row says what its figure rests on.
    let labels = [
        RestsOn::Mechanism,
        RestsOn::RestatedInput,
        RestsOn::UnmeasuredEstimate,
    ]
    .map(RestsOn::label);
    let rows: Vec<&str> = readme.lines().filter(|l| l.starts_with("| 00")).collect();
    assert_eq!(rows.len(), 5, "{readme}");
    for l in rows {
        assert!(
            labels.iter().any(|x| l.contains(x)),
            "no rests-on label: {l}"
        );
    }
}
