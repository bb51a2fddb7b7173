//! A rule tree as text: one line per rule, cluster, namespace and copy, drawn with box lines,
//! each copy's state coloured when the reader's terminal shows colours.

use super::tree::{ClusterNode, CopyNode, RuleTree};
use anstyle::{AnsiColor, Style};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::fmt::Write;

/// Whether to colour the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Colors {
    On,
    Off,
}

/// The trees as text, times relative to `now`.
pub fn render(trees: &[RuleTree], now: Timestamp, colors: Colors) -> String {
    let mut out = String::new();
    for (i, tree) in trees.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        rule(&mut out, tree, now, colors);
    }
    out
}

fn rule(out: &mut String, tree: &RuleTree, now: Timestamp, colors: Colors) {
    let place = match &tree.namespace {
        Some(ns) => format!("{ns}/{}", tree.name),
        None => tree.name.clone(),
    };
    let _ = write!(out, "{} {}", tree.kind, bold(&place, colors));
    match &tree.ready {
        Some(ready) => {
            let state = format!("Ready={}", ready.status);
            let painted = paint(&state, if ready.status == "True" { GREEN } else { RED }, colors);
            let _ = write!(out, "  {painted} {} for {}", ready.reason, ago(&ready.since, now));
        }
        None => out.push_str("  no status yet"),
    }
    if let Some(copies) = &tree.copies {
        let _ = write!(out, "  {copies} copies in sync");
    }
    out.push('\n');
    let _ = writeln!(out, "│ source: {}", tree.source);
    // A reason that is a copy's state sums up the copies the tree shows one by one; any other
    // (an invalid spec, a plugin that cannot load) is about the rule and shown here.
    if let Some(ready) = tree
        .ready
        .as_ref()
        .filter(|r| r.status != "True" && !r.message.is_empty() && !is_copy_state(&r.reason))
    {
        let _ = writeln!(out, "│ {}", one_line(&ready.message));
    }
    if !tree.counts.is_empty() {
        let counts: Vec<String> = tree
            .counts
            .iter()
            .map(|(state, n)| format!("{} {n}", paint(state, color_of(state), colors)))
            .collect();
        let _ = writeln!(out, "│ copies: {}", counts.join(", "));
    }
    for note in &tree.notes {
        let _ = writeln!(out, "│ note: {note}");
    }
    for warning in &tree.warnings {
        let times = match warning.count {
            1 => String::new(),
            n => format!(" (x{n})"),
        };
        let _ = writeln!(
            out,
            "│ {} {}{times} {} ago: {}",
            paint("Warning", RED, colors),
            warning.reason,
            ago(&warning.last, now),
            one_line(&warning.message)
        );
    }
    for (i, cluster_node) in tree.clusters.iter().enumerate() {
        let last = i + 1 == tree.clusters.len();
        cluster(out, cluster_node, last, now, colors);
    }
    if tree.clusters.is_empty() && tree.ready.is_some() {
        out.push_str("└── no copies\n");
    }
}

fn cluster(out: &mut String, node: &ClusterNode, last: bool, now: Timestamp, colors: Colors) {
    let (branch, indent) = if last {
        ("└── ", "    ")
    } else {
        ("├── ", "│   ")
    };
    let name = match &node.cluster {
        Some(c) => format!("RemoteCluster {c}"),
        None => "this cluster".to_owned(),
    };
    let _ = write!(
        out,
        "{branch}{}  {}/{} in sync",
        bold(&name, colors),
        node.synced,
        node.copies
    );
    if let Some(problem) = node.problem {
        let state = format!("{problem:?}");
        let _ = write!(out, "  {}", paint(&state, color_of(&state), colors));
    }
    out.push('\n');
    let rows = node.namespaces.len() + usize::from(node.not_listed > 0);
    for (i, namespace) in node.namespaces.iter().enumerate() {
        let last_ns = i + 1 == rows;
        let (branch, inner) = if last_ns {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        let label = namespace.namespace.as_deref().unwrap_or("(cluster-scoped)");
        let _ = writeln!(out, "{indent}{branch}{label}");
        for (j, copy_node) in namespace.copies.iter().enumerate() {
            let last_copy = j + 1 == namespace.copies.len();
            copy(
                out,
                &format!("{indent}{inner}"),
                copy_node,
                last_copy,
                now,
                colors,
            );
        }
    }
    if node.not_listed > 0 {
        let why = node.not_listed_why.as_deref().unwrap_or("not listed");
        let copies = if node.not_listed == 1 { "copy" } else { "copies" };
        let _ = writeln!(out, "{indent}└── {} more {copies}: {why}", node.not_listed);
    }
}

fn copy(out: &mut String, indent: &str, node: &CopyNode, last: bool, now: Timestamp, colors: Colors) {
    let branch = if last { "└── " } else { "├── " };
    let _ = write!(
        out,
        "{indent}{branch}{}  {}",
        node.name,
        paint(&node.state, color_of(&node.state), colors)
    );
    if let Some(since) = &node.since {
        match node.state.as_str() {
            "Synced" => write!(out, "  written {} ago", ago(since, now)),
            _ => write!(out, "  for {}", ago(since, now)),
        }
        .ok();
    }
    if let Some(source) = node.source.as_ref().filter(|_| node.state != "Synced") {
        let from = match &source.namespace {
            Some(ns) => format!("{ns}/{}", source.name),
            None => source.name.clone(),
        };
        let _ = write!(out, "  from {from}");
    }
    if let Some(why) = &node.why {
        let _ = write!(out, ": {}", one_line(why));
    }
    out.push('\n');
}

/// How long before `now`, in the largest unit that fits (`42s`, `5m`, `3h`, `2d`), as kubectl
/// prints ages.
pub fn ago(time: &Time, now: Timestamp) -> String {
    match now.as_second().saturating_sub(time.0.as_second()).max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn is_copy_state(reason: &str) -> bool {
    crate::api::CopyState::ALL
        .iter()
        .any(|state| format!("{state:?}") == reason)
}

/// Messages may hold newlines (a plugin's error); a tree line must not.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

const GREEN: Style = AnsiColor::Green.on_default();
const YELLOW: Style = AnsiColor::Yellow.on_default();
const RED: Style = AnsiColor::Red.on_default();
const BOLD: Style = Style::new().bold();

/// In sync is green; waiting on someone else (consent, a namespace, a plugin's decision) is
/// yellow; what failed or what mimeo stopped doing is red.
fn color_of(state: &str) -> Style {
    match state {
        "Synced" => GREEN,
        "NotAccepted" | "NamespaceMissing" | "Skipped" | "NotWatched" | "Deleting" => YELLOW,
        _ => RED,
    }
}

fn paint(text: &str, style: Style, colors: Colors) -> String {
    match colors {
        Colors::On => format!("{style}{text}{style:#}"),
        Colors::Off => text.to_owned(),
    }
}

fn bold(text: &str, colors: Colors) -> String {
    paint(text, BOLD, colors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::status::tree::{NamespaceNode, ReadyView};
    use std::collections::BTreeMap;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn tree() -> RuleTree {
        let copy = |name: &str, state: &str, since: i64, why: Option<&str>| CopyNode {
            name: name.into(),
            source: Some(crate::api::SourceRef {
                namespace: Some("team-a".into()),
                name: "creds".into(),
            }),
            state: state.into(),
            since: Some(at(since)),
            why: why.map(str::to_owned),
        };
        RuleTree {
            kind: "SyncRule".into(),
            namespace: Some("team-a".into()),
            name: "creds".into(),
            source: "Secret team-a/creds".into(),
            ready: Some(ReadyView {
                status: "False".into(),
                reason: "Conflict".into(),
                message: "creds in b:\nnot mimeo's".into(),
                since: at(1000 - 300),
                current: true,
            }),
            copies: Some("1/3".into()),
            counts: BTreeMap::from([
                ("Conflict".into(), 1),
                ("Synced".into(), 1),
                ("Unreachable".into(), 1),
            ]),
            clusters: vec![
                ClusterNode {
                    cluster: None,
                    copies: 3,
                    synced: 1,
                    problem: None,
                    namespaces: vec![
                        NamespaceNode {
                            namespace: Some("b".into()),
                            copies: vec![copy("creds", "Conflict", 1000 - 7200, Some("not mimeo's"))],
                        },
                        NamespaceNode {
                            namespace: Some("team-a".into()),
                            copies: vec![copy("creds-copy", "Synced", 1000 - 42, None)],
                        },
                    ],
                    not_listed: 1,
                    not_listed_why: Some("you may not list Secrets in: x".into()),
                },
                ClusterNode {
                    cluster: Some("east".into()),
                    copies: 1,
                    synced: 0,
                    problem: Some(crate::api::CopyState::Unreachable),
                    namespaces: vec![NamespaceNode {
                        namespace: Some("d".into()),
                        copies: vec![copy("creds", "Unreachable", 1000 - 200_000, Some("refused"))],
                    }],
                    not_listed: 0,
                    not_listed_why: None,
                },
            ],
            more_problems: None,
            notes: vec![],
            warnings: vec![crate::cmd::status::tree::WarningView {
                reason: "Conflict".into(),
                message: "copy b/creds:\nnot mimeo's".into(),
                count: 3,
                last: at(1000 - 120),
            }],
        }
    }

    #[test]
    fn a_tree_reads_as_a_tree() {
        let text = render(&[tree()], Timestamp::from_second(1000).unwrap(), Colors::Off);
        let expected = "\
SyncRule team-a/creds  Ready=False Conflict for 5m  1/3 copies in sync
│ source: Secret team-a/creds
│ copies: Conflict 1, Synced 1, Unreachable 1
│ Warning Conflict (x3) 2m ago: copy b/creds: not mimeo's
├── this cluster  1/3 in sync
│   ├── b
│   │   └── creds  Conflict  for 2h  from team-a/creds: not mimeo's
│   ├── team-a
│   │   └── creds-copy  Synced  written 42s ago
│   └── 1 more copy: you may not list Secrets in: x
└── RemoteCluster east  0/1 in sync  Unreachable
    └── d
        └── creds  Unreachable  for 2d  from team-a/creds: refused
";
        assert_eq!(text, expected);
    }

    #[test]
    fn a_rule_level_reason_is_shown_with_its_message() {
        let mut tree = tree();
        let ready = tree.ready.as_mut().unwrap();
        ready.reason = "InvalidSpec".into();
        ready.message = "targets[0]: set only one of\nnamespace and namespaceSelector".into();
        let text = render(&[tree], Timestamp::from_second(1000).unwrap(), Colors::Off);
        assert!(
            text.contains("│ targets[0]: set only one of namespace and namespaceSelector\n"),
            "{text}"
        );
    }

    #[test]
    fn colours_only_when_asked() {
        let now = Timestamp::from_second(1000).unwrap();
        assert!(!render(&[tree()], now, Colors::Off).contains('\x1b'));
        let coloured = render(&[tree()], now, Colors::On);
        assert!(coloured.contains("\x1b[32mSynced\x1b[0m"), "{coloured}");
        assert!(coloured.contains("\x1b[31mConflict\x1b[0m"), "{coloured}");
    }
}
