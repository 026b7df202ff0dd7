//! What a platform team installs (issue 35): the Helm chart under `deploy/helm/placer`, its
//! Grafana dashboard and its PrometheusRule alerts.
//! - Every query of the dashboard and of the alerts names metrics placer exports (found in
//!   the sources as the names the metrics endpoint writes), apart from the few that
//!   Prometheus itself makes, listed here with why.
//! - Every `.Values` key a template reads is in values.yaml, and every value is read.
//! - The chart renders with `helm template` (every optional object on) into the objects it
//!   promises, with the NRI index and metrics port of values.yaml. Without helm the render is a
//!   visible skip (a failure in CI, whose test script installs helm); `helm lint --strict`
//!   passes, and `values.schema.json` covers values.yaml and refuses a wrong type.
//! - The alert rules, rendered, pass their `promtool test rules` cases
//!   (`deploy/helm/tests/rules_test.yaml`: each rule firing and not, beside a release in
//!   another namespace); without promtool a visible skip (scripts/test.sh installs it).
//! - NOTES.txt names the job label the rules match.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn chart() -> PathBuf {
    repo().join("deploy/helm/placer")
}

/// Series Prometheus makes itself, which alerts may use.
const PROMETHEUS_OWN: &[&str] = &["up"];

/// Metric names placer's sources write: `placer_...` string literals in every crate.
fn exported() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut dirs = vec![repo().join("crates")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("crates dir").flatten() {
            let p = e.path();
            if p.is_dir() && !p.ends_with("target") && !p.ends_with("tests") {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                for (i, _) in text.match_indices("\"placer_") {
                    let name: String = text[i + 1..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    names.insert(name);
                }
            }
        }
    }
    names
}

/// The metric names a PromQL expression uses: its identifiers, less functions and
/// aggregations (followed by `(`), label lists (`by (...)` and the like), keywords, and what
/// is inside `{...}`, `[...]` and quotes.
fn metrics_in(expr: &str) -> Vec<String> {
    let mut bare = String::new();
    let (mut inside, mut quoted) = (0, false);
    for c in expr.chars() {
        match c {
            '"' => quoted = !quoted,
            '{' | '[' if !quoted => inside += 1,
            '}' | ']' if !quoted => inside -= 1,
            _ if quoted || inside > 0 => {}
            _ => bare.push(c),
        }
    }
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    let mut rest = bare.as_str();
    let mut skip_list = false;
    while let Some(start) = rest.find(|c: char| ident(c) || c == '(' || c == ')') {
        rest = &rest[start..];
        if let Some(r) = rest.strip_prefix('(') {
            rest = r;
            continue;
        }
        if let Some(r) = rest.strip_prefix(')') {
            skip_list = false;
            rest = r;
            continue;
        }
        let end = rest.find(|c: char| !ident(c)).unwrap_or(rest.len());
        let word = &rest[..end];
        rest = &rest[end..];
        let next = rest.trim_start();
        // A function or an aggregation (`sum by (l) (...)`): not a metric.
        let call = next.starts_with('(') || next.starts_with("by ") || next.starts_with("without ");
        if skip_list || word.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        if [
            "by",
            "without",
            "on",
            "ignoring",
            "group_left",
            "group_right",
        ]
        .contains(&word)
        {
            skip_list = true;
        } else if !call && !["and", "or", "unless", "bool", "offset"].contains(&word) {
            out.push(word.to_string());
        }
    }
    out
}

/// Whether `name` is an exported metric or one of a histogram's series.
fn is_exported(name: &str, exported: &BTreeSet<String>) -> bool {
    exported.contains(name)
        || ["_bucket", "_sum", "_count"]
            .iter()
            .any(|s| name.strip_suffix(s).is_some_and(|b| exported.contains(b)))
}

#[test]
fn promql_metric_names_are_found_and_labels_are_not() {
    assert_eq!(
        metrics_in(
            r#"sum by (policy, verdict) (increase(placer_action_verdicts_total{node=~"$node"}[1h]))"#
        ),
        ["placer_action_verdicts_total"]
    );
    assert_eq!(metrics_in(r#"up{job=~".*placer.*"} == 0"#), ["up"]);
    assert_eq!(
        metrics_in("sum(rate(a_total[5m])) / sum(rate(b_seconds_sum[5m])) > 0.5"),
        ["a_total", "b_seconds_sum"]
    );
}

/// Every `expr` of the dashboard's panels.
fn dashboard_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(chart().join("dashboards/placer.json")).expect("dashboard");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut out = Vec::new();
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                        _ => walk(x, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(&dash, &mut out);
    out
}

/// Every `expr:` of the alert rules (one line each in the template).
fn rule_exprs() -> Vec<String> {
    let text =
        std::fs::read_to_string(chart().join("templates/prometheusrule.yaml")).expect("rules");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        // The template's own value substitutions are numbers.
        .map(|e| e.replace("{{ .Values.prometheusRule.undoRatioWarn }}", "0.5"))
        .map(|e| e.replace("{{ include \"placer.job\" . }}", "placer-system/placer"))
        .map(|e| e.trim().to_string())
        .collect()
}

#[test]
fn every_dashboard_and_alert_query_names_metrics_placer_exports() {
    let exported = exported();
    assert!(
        exported.contains("placer_action_verdicts_total") && exported.len() > 8,
        "the metric names were not found in the sources: {exported:?}"
    );
    let dash = dashboard_exprs();
    let rules = rule_exprs();
    assert!(dash.len() >= 8 && rules.len() >= 4, "{dash:?} {rules:?}");
    for expr in dash.iter().chain(&rules) {
        let names = metrics_in(expr);
        assert!(!names.is_empty(), "no metric in {expr}");
        for n in names {
            assert!(
                is_exported(&n, &exported) || PROMETHEUS_OWN.contains(&n.as_str()),
                "{n} (in {expr}) is not a metric placer exports"
            );
        }
    }
    // What the issue asks the dashboard and the alerts to show.
    let all = dash.join("\n");
    for m in [
        "placer_action_verdicts_total",
        "placer_actions_total",
        "placer_lease_breaks_total",
        "placer_cycle_seconds_sum",
    ] {
        assert!(all.contains(m), "the dashboard shows no {m}");
    }
    assert!(all.contains(r#"verdict="undone""#), "no undo rate");
    let rules = rules.join("\n");
    for want in [r#"verdict="undone""#, r#"kind=~"restore_.*""#, "up{"] {
        assert!(rules.contains(want), "no alert on {want}");
    }
}

/// `.Values.a.b` paths the templates read.
fn values_read() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(chart().join("templates"))
        .expect("templates")
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).expect("template");
        for (i, _) in text.match_indices(".Values.") {
            let path: String = text[i + 8..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '_')
                .collect();
            out.insert(path.trim_end_matches('.').to_string());
        }
    }
    out
}

/// The dotted paths of values.yaml's keys (two-space indented YAML, as written there).
fn values_defined() -> BTreeSet<String> {
    let text = std::fs::read_to_string(chart().join("values.yaml")).expect("values.yaml");
    let mut out = BTreeSet::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut in_block = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim();
        if let Some(block_indent) = in_block {
            if t.is_empty() || indent > block_indent {
                continue;
            }
            in_block = None;
        }
        if t.is_empty() || t.starts_with('#') || t.starts_with('-') {
            continue;
        }
        let Some((key, rest)) = t.split_once(':') else {
            continue;
        };
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let path = stack
            .iter()
            .map(|(_, k)| k.as_str())
            .chain([key])
            .collect::<Vec<_>>()
            .join(".");
        out.insert(path.clone());
        if rest.trim() == "|" {
            in_block = Some(indent);
        }
        stack.push((indent, key.to_string()));
    }
    out
}

#[test]
fn the_charts_templates_and_values_agree() {
    let read = values_read();
    let defined = values_defined();
    for r in &read {
        assert!(
            defined.contains(r),
            ".Values.{r} is read but not in values.yaml"
        );
    }
    for d in &defined {
        assert!(
            read.iter().any(|r| r == d
                || r.starts_with(&format!("{d}."))
                || d.starts_with(&format!("{r}."))),
            "values.yaml's {d} is read by no template"
        );
    }
    // The chart's defaults are placer's (docs/kubernetes.md, "Conventions").
    let values = std::fs::read_to_string(chart().join("values.yaml")).expect("values.yaml");
    assert!(values.contains(&format!("index: {}", placer_nri::plugin::DEFAULT_INDEX)));
    let port = placer_core::config::Config::default()
        .metrics
        .listen
        .rsplit(':')
        .next()
        .expect("a port")
        .to_string();
    assert!(values.contains(&format!("metricsPort: {port}")), "{port}");
    assert!(
        values.contains(&format!("listen = \"0.0.0.0:{port}\"")),
        "{port}"
    );
}

/// helm (`HELM` or on PATH), or a visible skip.
fn helm() -> Option<String> {
    let helm = std::env::var("HELM").unwrap_or_else(|_| "helm".into());
    if std::process::Command::new(&helm)
        .arg("version")
        .output()
        .is_err()
    {
        placer_testkit::skip(
            "helm not found (scripts/test.sh installs it from the Go module proxy)",
        );
        return None;
    }
    Some(helm)
}

/// `helm template placer CHART --namespace placer-system ARGS`: its stdout, or its stderr
/// as the error.
fn render(helm: &str, chart: &Path, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(helm)
        .args(["template", "placer"])
        .arg(chart)
        .args(["--namespace", "placer-system"])
        .args(args)
        .output()
        .expect("helm template");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn the_alert_rules_pass_their_promtool_tests() {
    let Some(helm) = helm() else { return };
    if std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_err()
    {
        placer_testkit::skip("promtool not found (apt-get install prometheus)");
        return;
    }
    let rule = render(
        &helm,
        &chart(),
        &[
            "--set",
            "prometheusRule.enabled=true",
            "--show-only",
            "templates/prometheusrule.yaml",
        ],
    )
    .expect("render the rules");
    // The PrometheusRule's spec is a rules file: its lines after `spec:`, dedented.
    let spec: String = rule
        .lines()
        .skip_while(|l| *l != "spec:")
        .skip(1)
        .map(|l| format!("{}\n", l.strip_prefix("  ").unwrap_or(l)))
        .collect();
    assert!(spec.starts_with("groups:"), "{rule}");
    let dir = placer_testkit::TempDir::new("promtool-rules");
    std::fs::write(dir.path().join("rules.yaml"), &spec).expect("rules.yaml");
    std::fs::copy(
        repo().join("deploy/helm/tests/rules_test.yaml"),
        dir.path().join("rules_test.yaml"),
    )
    .expect("rules_test.yaml");
    let o = std::process::Command::new("promtool")
        .args(["test", "rules", "rules_test.yaml"])
        .current_dir(dir.path())
        .output()
        .expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{said}\nrules:\n{spec}");
    // Every alert of the chart has its cases.
    let cases =
        std::fs::read_to_string(repo().join("deploy/helm/tests/rules_test.yaml")).expect("cases");
    for alert in spec
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            cases.contains(&format!("alertname: {alert}")),
            "{alert} has no promtool case"
        );
    }
}

/// The top-level keys of values.yaml.
fn top_level_values() -> BTreeSet<String> {
    values_defined()
        .into_iter()
        .filter(|k| !k.contains('.'))
        .collect()
}

#[test]
fn the_values_schema_covers_values_yaml_and_refuses_a_wrong_type() {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(chart().join("values.schema.json")).expect("schema"),
    )
    .expect("schema is JSON");
    let props: BTreeSet<String> = schema["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .cloned()
        .collect();
    assert_eq!(props, top_level_values());
    assert_eq!(schema["additionalProperties"], false);
    let Some(helm) = helm() else { return };
    for bad in ["metricsPort=abc", "nri.index=100", "nosuchkey=1"] {
        let r = render(&helm, &chart(), &["--set", bad]);
        assert!(r.is_err(), "{bad} was accepted");
    }
}

#[test]
fn the_notes_name_the_job_the_rules_match() {
    let Some(helm) = helm() else { return };
    // helm renders NOTES.txt only at install; a copy of the chart renders it as a value.
    let dir = placer_testkit::TempDir::new("chart-notes");
    let copy = dir.path().join("placer");
    let o = std::process::Command::new("cp")
        .arg("-r")
        .arg(chart())
        .arg(&copy)
        .status()
        .expect("cp");
    assert!(o.success());
    std::fs::copy(copy.join("templates/NOTES.txt"), copy.join("notes-src.txt")).unwrap();
    std::fs::write(
        copy.join("templates/notes.yaml"),
        "notes: |\n  {{- tpl (.Files.Get \"notes-src.txt\") . | nindent 2 }}\n",
    )
    .unwrap();
    let notes = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--show-only", "templates/notes.yaml"]);
        render(&helm, &copy, &a).expect("render the notes")
    };
    let with = notes(&["--set", "podMonitor.enabled=true"]);
    assert!(with.contains("job \"placer-system/placer\""), "{with}");
    assert!(
        with.contains("The PodMonitor sets that job label"),
        "{with}"
    );
    let own = notes(&["--set", "metricsJob=node-agents"]);
    assert!(own.contains("job \"node-agents\""), "{own}");
    assert!(own.contains("set metricsJob"), "{own}");
}

#[test]
fn the_chart_renders_every_object_it_promises() {
    let Some(helm) = helm() else { return };
    let text = render(
        &helm,
        &chart(),
        &[
            "--set",
            "podMonitor.enabled=true,serviceMonitor.enabled=true",
            "--set",
            "prometheusRule.enabled=true,grafanaDashboard.enabled=true",
            "--set",
            "nodeSelector.role=compute",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for kind in [
        "kind: DaemonSet",
        "kind: ConfigMap",
        "kind: PodMonitor",
        "kind: ServiceMonitor",
        "kind: Service",
        "kind: PrometheusRule",
    ] {
        assert!(text.contains(kind), "no {kind} in:\n{text}");
    }
    for want in [
        format!("--nri-index={}", placer_nri::plugin::DEFAULT_INDEX),
        "priorityClassName: system-node-critical".into(),
        "role: compute".into(),
        "name: config-reload".into(),
        "\"uid\": \"placer-overview\"".into(),
    ] {
        assert!(text.contains(&want), "no {want} in:\n{text}");
    }
    // The monitors set the job the rules match.
    assert_eq!(
        text.matches("replacement: \"placer-system/placer\"")
            .count(),
        2,
        "{text}"
    );
    assert!(
        text.contains(r#"absent(up{job="placer-system/placer"})"#),
        "{text}"
    );
    let lint = std::process::Command::new(&helm)
        .args(["lint", "--strict"])
        .arg(chart())
        .output()
        .expect("helm lint");
    assert!(
        lint.status.success(),
        "{}",
        String::from_utf8_lossy(&lint.stdout)
    );
}
