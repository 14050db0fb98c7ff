//! The sample configuration `deploy/ticketing.toml` (shipped in the server
//! tarball, and as /etc/ticketing/ticketing.toml in the Debian package) lists
//! every setting of the server, sets each one that has a default to that
//! default, sets the settings of [`PRODUCTION`] to their production values
//! (it must run durable: docs/deployment.md, "Durability"), and loads with the
//! server's own config loader. A setting added to `ticketing-server` without a
//! line in the sample fails here.

use std::collections::BTreeSet;
use std::path::PathBuf;
use ticketing_server::config::{Cli, Config};

/// The settings without a default that the sample sets on purpose, with their
/// values: what the shipped deployment needs (a crash and a restart by the
/// supervisor must not forget a holder).
const PRODUCTION: &[(&str, &str)] = &[("data_dir", "/var/lib/ticketing")];

fn sample_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/ticketing.toml")
}

fn sample() -> String {
    std::fs::read_to_string(sample_path()).expect("deploy/ticketing.toml is readable")
}

/// The line that starts the commented `[[principal]]` examples at the end
/// of the sample (tables, not settings: checked by their own test).
const PRINCIPALS: &str = "# --- Principals";

/// The sample up to its principal examples: the settings.
fn settings_part() -> String {
    let text = sample();
    match text.find(PRINCIPALS) {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// The settings a config file may hold: every long flag but `--config`, `--help`, `--version`.
fn settings() -> BTreeSet<String> {
    Config::command()
        .get_arguments()
        .filter(|a| a.get_long().is_some())
        .map(|a| a.get_id().as_str().to_owned())
        .filter(|id| !matches!(id.as_str(), "config" | "help" | "version"))
        .collect()
}

/// The key of a line `key = value` or `# key = value` (a setting left at no default).
fn line_key(line: &str) -> Option<(String, bool)> {
    let commented = line.trim_start().starts_with('#');
    let body = line.trim_start().trim_start_matches('#').trim();
    let (key, _) = body.split_once('=')?;
    let key = key.trim();
    let is_key = !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'-');
    is_key.then(|| (key.replace('-', "_"), commented))
}

/// The `[default: X]` a setting's help shows, if it is a value (a
/// description such as `[default: the bound listen address]` is not one).
fn help_default(id: &str) -> Option<String> {
    let cmd = Config::command();
    let arg = cmd.get_arguments().find(|a| a.get_id() == id)?;
    let help = arg.get_help()?.to_string();
    let start = help.rfind("[default: ")? + "[default: ".len();
    let default = help[start..].trim_end_matches(']');
    (!default.contains(' ')).then(|| default.to_owned())
}

#[test]
fn every_setting_is_listed_once_and_every_listed_key_is_a_setting() {
    let text = settings_part();
    let mut listed = BTreeSet::new();
    for line in text.lines() {
        if let Some((key, _)) = line_key(line) {
            assert!(listed.insert(key.clone()), "deploy/ticketing.toml lists {key} twice");
        }
    }
    let settings = settings();
    let missing: Vec<_> = settings.difference(&listed).collect();
    assert!(missing.is_empty(), "deploy/ticketing.toml does not list the settings {missing:?}");
    let unknown: Vec<_> = listed.difference(&settings).collect();
    assert!(unknown.is_empty(), "deploy/ticketing.toml lists keys the server does not have: {unknown:?}");
}

#[test]
fn every_setting_with_a_default_is_set_to_it() {
    let table: toml::Table = sample().parse().expect("deploy/ticketing.toml is valid TOML");
    for id in settings() {
        match (help_default(&id), table.get(&id)) {
            (Some(default), Some(value)) => {
                let given = match value {
                    toml::Value::String(s) => s.clone(),
                    toml::Value::Integer(i) => i.to_string(),
                    toml::Value::Float(f) => f.to_string(),
                    other => panic!("{id}: unexpected value {other}"),
                };
                assert_eq!(given, default, "deploy/ticketing.toml sets {id} to {given}, its default is {default}");
            }
            (Some(default), None) => panic!("deploy/ticketing.toml: {id} has the default {default}; set it"),
            (None, Some(toml::Value::Boolean(b))) => assert!(!b, "{id}: a switch is off by default"),
            (None, given) => match PRODUCTION.iter().find(|(key, _)| *key == id) {
                Some((_, production)) => assert_eq!(
                    given.and_then(toml::Value::as_str),
                    Some(*production),
                    "deploy/ticketing.toml must set {id} = {production:?} (the shipped deployment)"
                ),
                None => {
                    if let Some(value) = given {
                        panic!("deploy/ticketing.toml sets {id} = {value}, which has no default: comment it")
                    }
                }
            },
        }
    }
}

#[test]
fn the_sample_loads_with_the_server_loader_and_gives_the_defaults() {
    let cli = Cli { config: Some(sample_path()), ..Cli::default() };
    let c = Config::resolve(cli).expect("deploy/ticketing.toml loads");
    let d = Config::default();
    assert_eq!(c.listen, d.listen);
    assert_eq!(c.limits, d.limits);
    assert_eq!(c.handshake_timeout, d.handshake_timeout);
    assert_eq!(c.peer_handshake_timeout, d.peer_handshake_timeout);
    assert_eq!(c.peer_frame_timeout, d.peer_frame_timeout);
    assert_eq!(
        (c.heartbeat_ms, c.election_timeout_min_ms, c.election_timeout_max_ms),
        (d.heartbeat_ms, d.election_timeout_min_ms, d.election_timeout_max_ms)
    );
    assert!(c.peers.is_empty() && !c.bootstrap && c.client_tokens.is_empty() && c.admin_listen.is_none());
    assert_eq!(c.data_dir, Some(PathBuf::from("/var/lib/ticketing")), "the sample runs durable");
    assert_eq!(d.data_dir, None, "memory mode stays the embedded default");
}

#[test]
fn the_commented_examples_have_the_right_types() {
    // Uncommented, every example value must be accepted by the file's parser
    // (type and key), so the sample shows values a user can use as they are.
    let uncommented: String = settings_part()
        .lines()
        .map(|l| match line_key(l) {
            Some((_, true)) => {
                let body = l.trim_start().trim_start_matches('#').trim();
                // Drop a trailing comment after the value.
                let body = match body.find("  #") {
                    Some(i) => &body[..i],
                    None => body,
                };
                format!("{body}\n")
            }
            _ => format!("{l}\n"),
        })
        .collect();
    let parsed: Result<Cli, _> = toml::from_str(&uncommented);
    assert!(parsed.is_ok(), "the commented examples do not parse as settings: {parsed:?}\n{uncommented}");
}

#[test]
fn the_commented_principal_examples_are_valid_tables() {
    let text = sample();
    let at = text.find(PRINCIPALS).expect("deploy/ticketing.toml ends with commented [[principal]] examples");
    let first = text[at..].find("# [[principal]]").expect("a commented [[principal]] table") + at;
    let uncommented: String = text[first..]
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix('#').unwrap_or(l).strip_prefix(' ').unwrap_or("")))
        .collect();
    let parsed: Cli = toml::from_str(&uncommented)
        .unwrap_or_else(|e| panic!("the principal examples do not parse: {e}\n{uncommented}"));
    let names: Vec<_> = parsed.principal.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["orders", "ops"]);
    assert_eq!(parsed.principal[1].keys, [""], "an example with every key");
    assert!(parsed.principal[0].max_waiters.is_some() && parsed.principal[0].max_held_keys.is_some());
}
