//! Principals (docs/security.md, "Several teams: principals"): who may use
//! which keys. A principal has a name, tokens, the key prefixes it may use
//! and optional caps. The token that matched in `AUTH` names the
//! connection's principal; every request is checked against the CURRENT
//! definition of that principal (a reload that narrows its keys applies to
//! open connections at once; a principal a reload removed may use no key).
//!
//! `--client-tokens-file` / `TICKETING_CLIENT_TOKENS` are the principal
//! named `default`, which may use every key. No token at all = auth off
//! (every connection may use every key).

use crate::config::{invalid, read, ConfigError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use ticketing_proto::auth::Secret;
use ticketing_proto::limits::MAX_KEY_LEN;

/// The name of the principal of `--client-tokens-file`.
pub const DEFAULT: &str = "default";

/// A `[[principal]]` table of the config file, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalSpec {
    /// `[a-z0-9_-]`, 1-64 bytes, unique.
    pub name: String,
    /// One token a line, like `--client-tokens-file`.
    pub tokens_file: PathBuf,
    /// Key prefixes it may use; `[""]` = every key.
    pub keys: Vec<String>,
    /// Waiters it may have queued at once, over all its connections (a
    /// multi-key waiter once per key); over it: `B`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_waiters: Option<usize>,
    /// Keys its grants may hold at once, over all its connections (a
    /// multi-key grant once per key, a counted holder once); over it: `B`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_held_keys: Option<usize>,
}

/// One principal as the server checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Its name (metrics label, logs).
    pub name: String,
    /// Key prefixes it may use (bytewise; `""` = every key).
    pub prefixes: Vec<Vec<u8>>,
    /// Waiters it may have queued at once (`None`: only the server's limits).
    pub max_waiters: Option<usize>,
    /// Keys its grants may hold at once (`None`: only the server's limits).
    pub max_held_keys: Option<usize>,
}

/// What the leader checks of a request's principal: its name (the count of
/// its waiters and held keys) and its caps, by its current definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrincipalCap {
    /// The principal's name.
    pub name: Arc<str>,
    /// Its waiters cap.
    pub max_waiters: Option<usize>,
    /// Its held-keys cap.
    pub max_held_keys: Option<usize>,
}

impl Principal {
    /// Whether it may use `key`: some prefix starts it (bytewise).
    pub fn may_use(&self, key: &[u8]) -> bool {
        self.prefixes.iter().any(|p| key.starts_with(p))
    }

    /// The first of `keys` it may not use (`None`: it may use them all).
    pub fn first_forbidden<'k>(&self, keys: &'k [ticketing_proto::Key]) -> Option<&'k ticketing_proto::Key> {
        keys.iter().find(|k| !self.may_use(k.as_bytes()))
    }
}

/// Every principal and the flattened token list `AUTH` checks.
#[derive(Debug, Clone, Default)]
pub struct Principals {
    tokens: Vec<Secret>,
    /// The index in `list` of each token's principal.
    owner: Vec<usize>,
    list: Vec<Arc<Principal>>,
}

impl Principals {
    /// The principals of the configuration: `default_tokens` (from
    /// `--client-tokens-file`/`TICKETING_CLIENT_TOKENS`) as `default`, then
    /// every `[[principal]]`, each tokens file read now. Every rule broken is
    /// an error naming the principal (or file): a bad name, a name given
    /// twice, no keys, a tokens file that does not read or holds no token,
    /// a token of two principals.
    pub fn load(default_tokens: Vec<Secret>, specs: &[PrincipalSpec]) -> Result<Principals, ConfigError> {
        let mut p = Principals::default();
        if !default_tokens.is_empty() {
            p.push(
                Principal {
                    name: DEFAULT.to_owned(),
                    prefixes: vec![Vec::new()],
                    max_waiters: None,
                    max_held_keys: None,
                },
                default_tokens,
            )?;
        }
        for spec in specs {
            check_name(&spec.name)?;
            if p.list.iter().any(|q| q.name == spec.name) {
                return Err(invalid("[[principal]]", format!("the name {:?} is given twice", spec.name)));
            }
            if spec.keys.is_empty() {
                return Err(invalid(
                    "[[principal]]",
                    format!("{:?}: keys is empty: list the key prefixes it may use ([\"\"] = every key)", spec.name),
                ));
            }
            if let Some(bad) = spec.keys.iter().find(|k| !prefix_can_match(k)) {
                return Err(invalid(
                    "[[principal]]",
                    format!(
                        "{:?}: the key prefix {bad:?} can start no key: a key is 1-{MAX_KEY_LEN} bytes in \
                         0x21-0x7E (visible ASCII, no space), so a prefix is \"\" or such bytes",
                        spec.name
                    ),
                ));
            }
            if spec.max_waiters == Some(0) {
                return Err(invalid("[[principal]]", format!("{:?}: max_waiters must be at least 1", spec.name)));
            }
            if spec.max_held_keys == Some(0) {
                return Err(invalid("[[principal]]", format!("{:?}: max_held_keys must be at least 1", spec.name)));
            }
            let tokens = tokens_file(&spec.name, &spec.tokens_file)?;
            let principal = Principal {
                name: spec.name.clone(),
                prefixes: spec.keys.iter().map(|k| k.as_bytes().to_vec()).collect(),
                max_waiters: spec.max_waiters,
                max_held_keys: spec.max_held_keys,
            };
            p.push(principal, tokens)?;
        }
        Ok(p)
    }

    fn push(&mut self, principal: Principal, tokens: Vec<Secret>) -> Result<(), ConfigError> {
        let index = self.list.len();
        for t in tokens {
            if let Some(i) = self.tokens.iter().position(|u| *u == t) {
                if self.owner[i] == index {
                    continue; // the same line twice in one file
                }
                return Err(invalid(
                    "[[principal]]",
                    format!(
                        "a token of {:?} is also a token of {:?}: each token names one principal",
                        principal.name, self.list[self.owner[i]].name
                    ),
                ));
            }
            self.tokens.push(t);
            self.owner.push(index);
        }
        self.list.push(Arc::new(principal));
        Ok(())
    }

    /// Every accepted token (empty = auth off), for `auth::check_client`.
    pub fn tokens(&self) -> &[Secret] {
        &self.tokens
    }

    /// Whether client authentication is off (no token at all).
    pub fn auth_off(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The principal of token `i` of [`Principals::tokens`].
    pub fn of_token(&self, i: usize) -> Option<&Arc<Principal>> {
        self.owner.get(i).map(|&p| &self.list[p])
    }

    /// The principal named `name`, as currently defined.
    pub fn by_name(&self, name: &str) -> Option<&Arc<Principal>> {
        self.list.iter().find(|p| p.name == name)
    }

    /// Every principal, in the order configured.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Principal>> {
        self.list.iter()
    }
}

/// The principals of `config` read again (SIGHUP): the client tokens
/// (file and environment) and the config file's `[[principal]]` tables with
/// their tokens files. All or nothing: any problem is an error, and the
/// caller keeps the principals it has (`current`). Whether client
/// authentication is on is decided at start: new principals that would turn
/// it off (no token left, say a config file emptied by mistake) or on (a
/// connection opened without authentication would keep every key) are an
/// error too.
pub fn reread(config: &crate::config::Config, current: &Principals) -> Result<Principals, ConfigError> {
    let default_tokens = crate::config::client_tokens(config.client_tokens_file.as_deref())?;
    let specs = match &config.config_file {
        Some(path) => specs_of_file(path)?,
        None => Vec::new(),
    };
    let new = Principals::load(default_tokens, &specs)?;
    match (current.auth_off(), new.auth_off()) {
        (false, true) => Err(invalid(
            "[[principal]]",
            "no client token is left (no --client-tokens-file token, no principal): that would turn client \
             authentication off; restart the server to run without authentication",
        )),
        (true, false) => Err(invalid(
            "[[principal]]",
            "the server runs without client authentication: restart it to turn authentication on",
        )),
        _ => Ok(new),
    }
}

/// The `[[principal]]` tables of the config file at `path`.
fn specs_of_file(path: &Path) -> Result<Vec<PrincipalSpec>, ConfigError> {
    let file_error = |problem: String| ConfigError::File { path: path.to_owned(), problem };
    let text = read("config file", path)?;
    let mut table: toml::Table = text.parse().map_err(|e| file_error(format!("not valid TOML: {e}")))?;
    match table.remove("principal") {
        None => Ok(Vec::new()),
        Some(v) => v.try_into().map_err(|e: toml::de::Error| file_error(format!("[[principal]]: {e}"))),
    }
}

/// Whether some key can start with `prefix`: `""`, or at most
/// `MAX_KEY_LEN` bytes that a key may have (docs/protocol.md, "Fields").
fn prefix_can_match(prefix: &str) -> bool {
    prefix.len() <= MAX_KEY_LEN && prefix.bytes().all(|b| (0x21..=0x7E).contains(&b))
}

/// `[a-z0-9_-]`, 1-64 bytes.
fn check_name(name: &str) -> Result<(), ConfigError> {
    let ok = (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(invalid("[[principal]]", format!("name {name:?}: use 1-64 of a-z, 0-9, '_' and '-'")))
    }
}

/// A principal's tokens file: one token a line, at least one.
fn tokens_file(name: &str, path: &Path) -> Result<Vec<Secret>, ConfigError> {
    let text = zeroize::Zeroizing::new(read("token file", path)?);
    let tokens: Vec<Secret> = text.lines().map(str::trim).filter(|l| !l.is_empty()).map(Secret::from).collect();
    if tokens.is_empty() {
        return Err(invalid(
            "[[principal]]",
            format!("{name:?}: {} holds no token: put at least one token in it", path.display()),
        ));
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(prefixes: &[&str]) -> Principal {
        Principal {
            name: "t".into(),
            prefixes: prefixes.iter().map(|s| s.as_bytes().to_vec()).collect(),
            max_waiters: None,
            max_held_keys: None,
        }
    }

    #[test]
    fn prefixes_match_bytewise() {
        let every = p(&[""]);
        assert!(every.may_use(b"anything") && every.may_use(b"x"));
        let orders = p(&["orders/", "carts/"]);
        assert!(orders.may_use(b"orders/1") && orders.may_use(b"carts/") && orders.may_use(b"orders/"));
        assert!(!orders.may_use(b"orders") && !orders.may_use(b"order/1") && !orders.may_use(b"payments/1"));
        // Overlapping prefixes: either one is enough.
        let overlap = p(&["a", "ab/"]);
        assert!(overlap.may_use(b"ab/1") && overlap.may_use(b"abc") && !overlap.may_use(b"b"));
        // Multibyte UTF-8: bytes, not characters.
        let uni = p(&["é/"]);
        assert!(
            uni.may_use("é/x".as_bytes()) && !uni.may_use("e/x".as_bytes()) && !uni.may_use(&"é/x".as_bytes()[..1])
        );
        let none = p(&[]);
        assert!(!none.may_use(b"k"));
        let keys_all = ["orders/1", "payments/2", "x"];
        let keys =
            |ks: &[&str]| ks.iter().map(|k| ticketing_proto::Key::new(k.to_string()).unwrap()).collect::<Vec<_>>();
        assert_eq!(orders.first_forbidden(&keys(&keys_all)).map(|k| k.as_str()), Some("payments/2"));
        assert_eq!(orders.first_forbidden(&keys(&["orders/1", "carts/2"])), None);
    }

    struct TempDir(PathBuf);
    impl TempDir {
        fn new(name: &str) -> TempDir {
            let path = std::env::temp_dir().join(format!("ticketing-principal-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn spec(name: &str, tokens_file: PathBuf, keys: &[&str]) -> PrincipalSpec {
        PrincipalSpec {
            name: name.into(),
            tokens_file,
            keys: keys.iter().map(|s| s.to_string()).collect(),
            max_waiters: None,
            max_held_keys: None,
        }
    }

    #[test]
    fn load_checks_every_rule() {
        let dir = TempDir::new("load");
        let a = file(dir.path(), "a", "tok-a\n\n tok-a2 \n");
        let b = file(dir.path(), "b", "tok-b\n");
        let empty = file(dir.path(), "e", " \n\n");
        let ps =
            Principals::load(vec![Secret::from("d")], &[spec("a", a.clone(), &["a/"]), spec("b", b.clone(), &["b/"])])
                .unwrap();
        assert_eq!(ps.tokens().len(), 4);
        assert_eq!(ps.of_token(0).unwrap().name, DEFAULT);
        assert!(ps.of_token(0).unwrap().may_use(b"zz"));
        assert_eq!(ps.of_token(2).unwrap().name, "a");
        assert_eq!(ps.of_token(3).unwrap().name, "b");
        assert_eq!(ps.by_name("b").unwrap().prefixes, vec![b"b/".to_vec()]);
        assert!(!ps.auth_off());
        assert!(Principals::load(vec![], &[]).unwrap().auth_off());

        let err = |specs: &[PrincipalSpec]| Principals::load(vec![], specs).unwrap_err().to_string();
        assert!(
            err(&[spec("a", empty.clone(), &["a/"])]).contains("holds no token"),
            "{}",
            err(&[spec("a", empty, &["a/"])])
        );
        assert!(err(&[spec("a", dir.path().join("missing"), &["a/"])]).contains("cannot read"));
        assert!(err(&[spec("A", a.clone(), &["a/"])]).contains("name \"A\""));
        assert!(err(&[spec("", a.clone(), &["a/"])]).contains("name"));
        assert!(err(&[spec("a", a.clone(), &[])]).contains("keys is empty"));
        // A prefix no key can start with: multibyte UTF-8, a space, too long.
        for bad in ["é/", "orders /", "tab\t", &"k".repeat(251)] {
            let e = err(&[spec("a", a.clone(), &["a/", bad])]);
            assert!(e.contains("can start no key") && e.contains("\"a\""), "{e}");
        }
        let longest = "k".repeat(250);
        assert!(Principals::load(vec![], &[spec("a", a.clone(), &["", "~", &longest])]).is_ok());
        assert!(err(&[spec("a", a.clone(), &["a/"]), spec("a", b.clone(), &["b/"])]).contains("given twice"));
        let mut capped = spec("a", a.clone(), &["a/"]);
        capped.max_waiters = Some(0);
        assert!(err(&[capped]).contains("max_waiters must be at least 1"));
        let mut capped = spec("a", a.clone(), &["a/"]);
        capped.max_held_keys = Some(0);
        assert!(err(&[capped]).contains("max_held_keys must be at least 1"));
        let dup = file(dir.path(), "dup", "tok-a\n");
        assert!(err(&[spec("a", a.clone(), &["a/"]), spec("c", dup, &["c/"])]).contains("also a token of \"a\""));
    }

    #[test]
    fn a_reload_reads_everything_again_and_never_turns_authentication_off_or_on() {
        let dir = TempDir::new("reread");
        let tokens = file(dir.path(), "orders.tokens", "tok\n");
        let table = format!("[[principal]]\nname = \"orders\"\ntokens_file = {:?}\nkeys = [\"o/\"]\n", tokens);
        let cfg = file(dir.path(), "ticketing.toml", &table);
        let config = crate::config::Config { config_file: Some(cfg.clone()), ..crate::config::Config::default() };
        let on = reread(&config, &Principals::default()).unwrap_err().to_string();
        assert!(on.contains("restart it to turn authentication on"), "{on}");
        let current = Principals::load(vec![], &[spec("orders", tokens.clone(), &["o/"])]).unwrap();
        // Narrowed and given a cap: read again, all of it.
        std::fs::write(&cfg, format!("{table}max_held_keys = 3\n").replace("\"o/\"", "\"o/x\"")).unwrap();
        let new = reread(&config, &current).unwrap();
        let orders = new.by_name("orders").unwrap();
        assert_eq!((orders.prefixes.clone(), orders.max_held_keys), (vec![b"o/x".to_vec()], Some(3)));
        // Every principal gone (a config file emptied by mistake): refused.
        std::fs::write(&cfg, "").unwrap();
        let off = reread(&config, &current).unwrap_err().to_string();
        assert!(off.contains("would turn client authentication off"), "{off}");
        // Not TOML, an unknown field, a tokens file emptied: refused.
        for bad in ["[[principal]\n".to_owned(), format!("{table}colour = 1\n")] {
            std::fs::write(&cfg, bad).unwrap();
            assert!(reread(&config, &current).is_err());
        }
        std::fs::write(&cfg, &table).unwrap();
        std::fs::write(&tokens, "\n").unwrap();
        assert!(reread(&config, &current).unwrap_err().to_string().contains("holds no token"));
    }

    #[test]
    fn specs_parse_from_toml_and_refuse_unknown_fields() {
        #[derive(Deserialize)]
        struct F {
            principal: Vec<PrincipalSpec>,
        }
        let f: F =
            toml::from_str("[[principal]]\nname = \"orders\"\ntokens_file = \"/x\"\nkeys = [\"orders/\"]\n").unwrap();
        assert_eq!(f.principal[0].keys, vec!["orders/".to_owned()]);
        assert!(toml::from_str::<F>("[[principal]]\nname = \"o\"\ntokens_file = \"/x\"\nkeys = []\nkey = 1\n").is_err());
    }
}
