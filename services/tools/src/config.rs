//! The tool layer's configuration: upstream MCP servers and the policies that
//! govern them, read from a YAML file (`TRAWL_TOOLS_CONFIG`).
//!
//! ```yaml
//! servers:
//!   everything:
//!     command: node                      # stdio: a child process
//!     args: [node_modules/@modelcontextprotocol/server-everything/dist/index.js, stdio]
//!     env: {}                            # the only variables it gets beyond PATH, HOME, ...
//!     new_tools: approve                 # auto (default) | approve
//!     overlaps: allow                    # hold (default) | allow: its tools may do what other servers' do
//!     scan: {high: block, medium: hold, low: flag}    # the defaults; also strip
//!     allow_hosts: [example.com]         # hosts its descriptions may send data to
//!     result_max_bytes: 262144
//!     timeout: 30s                       # per request
//!     list_timeout: 10s                  # a whole listing: start, handshake, every page
//!   docs:
//!     url: http://127.0.0.1:3001/mcp     # Streamable HTTP
//!     headers: {X-Team: research}
//! list_concurrency: 8                   # servers listed at once by a refresh
//! policy:
//!   default: allow                       # allow | deny | approve | isolated
//!   tools:
//!     "everything.longRunningOperation": deny
//!     "*.send_*": approve                # `*` matches any run of characters
//! ```
//!
//! Paths: a relative file path (`--config tools.yaml`) is relative to the current
//! directory. In the file, a relative `command` with a `/` and a relative `cwd`
//! are relative to the file's folder; a stdio server runs in its `cwd` (default:
//! the file's folder), so its relative `args` are relative to that; a `command`
//! without a `/` is looked up in `PATH`.
//!
//! Browser and computer-use tools (`*browser*`, `*computer*`) are `isolated`
//! unless a rule says otherwise: they never run outside an isolated worker pool.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::mcp::{Transport, UpstreamConfig};
use crate::name::{NameError, ServerName};
use crate::scan::Severity;

/// The server name of the built-in Bright Data tools.
pub const BUILTIN_SERVER: &str = "brightdata";

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// What happens to a tool a scanner finding of some severity was found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanAction {
    /// Noted in the catalog; the tool is listed without the sentences (or
    /// values) found, as with `Strip`.
    Flag,
    /// The sentences (or values) found are removed from what models are shown.
    Strip,
    /// Held for review: neither listed nor callable until a person approves a
    /// `tool_review` approval, which pins that definition as reviewed.
    Hold,
    /// The tool is neither listed nor callable.
    Block,
}

/// Per severity, what happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScanPolicy {
    #[serde(default = "block")]
    pub high: ScanAction,
    #[serde(default = "hold")]
    pub medium: ScanAction,
    #[serde(default = "flag")]
    pub low: ScanAction,
}

fn block() -> ScanAction {
    ScanAction::Block
}
fn hold() -> ScanAction {
    ScanAction::Hold
}
fn flag() -> ScanAction {
    ScanAction::Flag
}

impl Default for ScanPolicy {
    fn default() -> ScanPolicy {
        ScanPolicy {
            high: ScanAction::Block,
            medium: ScanAction::Hold,
            low: ScanAction::Flag,
        }
    }
}

impl ScanPolicy {
    pub fn action(&self, s: Severity) -> ScanAction {
        match s {
            Severity::High => self.high,
            Severity::Medium => self.medium,
            Severity::Low => self.low,
        }
    }
}

/// What happens to a tool a server adds after its first listing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NewTools {
    /// Pinned on sight.
    #[default]
    Auto,
    /// Held until a `new_tool` approval.
    Approve,
}

/// Whether a server's tools may do what another server's tools do under other
/// names (the scanner's `function-overlap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overlaps {
    /// Found, at medium severity: held for review by default.
    #[default]
    Hold,
    /// Intended (a second search provider, a mirror): not a finding.
    Allow,
}

/// Who may call a tool, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Allow,
    Deny,
    /// Each call (tool and arguments) needs a `tool_call` approval.
    Approve,
    /// Only in an isolated worker pool (browser, computer use).
    Isolated,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Allow => "allow",
            Access::Deny => "deny",
            Access::Approve => "approve",
            Access::Isolated => "isolated",
        }
    }
}

/// One upstream MCP server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub name: ServerName,
    pub upstream: UpstreamConfig,
    pub new_tools: NewTools,
    pub overlaps: Overlaps,
    pub scan: ScanPolicy,
    pub allow_hosts: Vec<String>,
    pub result_max_bytes: usize,
    pub expose: Expose,
    /// A whole listing of the server (start, handshake, every page) ends after
    /// this: the server counts as down for that refresh, and the others do not wait.
    pub list_timeout: Duration,
}

/// What trawl's own MCP endpoint (`/mcp`) shows of a server besides its
/// namespaced tools. All off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expose {
    /// List and call its tools (and prompts) under their own names, not
    /// `server.tool`, where no other name is taken (for clients that expect
    /// fixed names, such as conformance suites). The catalog, pins, policy and
    /// audit still use the namespaced name.
    #[serde(default)]
    pub bare_names: bool,
    /// Forward `prompts/list` and `prompts/get` to it.
    #[serde(default)]
    pub prompts: bool,
    /// Forward `resources/list`, `resources/templates/list`, `resources/read` and
    /// (un)subscriptions of its resources to it.
    #[serde(default)]
    pub resources: bool,
}

/// The whole configuration, checked.
#[derive(Clone, Debug)]
pub struct ToolsConfig {
    pub servers: Vec<ServerConfig>,
    /// How many servers a refresh lists at once.
    pub list_concurrency: usize,
    /// Scanning policy of the built-in tools.
    pub builtin_scan: ScanPolicy,
    pub policy: Policy,
    /// Sentence embeddings for the guard (`TRAWL_EMBED_MODEL`); `None`: the
    /// checks that need them are off. Not part of the YAML file.
    pub embeddings: Option<std::sync::Arc<crate::embed::Embeddings>>,
    /// The guard's model judge (`TRAWL_GUARD_MODEL`); `None`: off. Not part of
    /// the YAML file.
    pub judge: Option<std::sync::Arc<crate::guard::Judge>>,
}

impl Default for ToolsConfig {
    fn default() -> ToolsConfig {
        ToolsConfig {
            servers: Vec::new(),
            list_concurrency: LIST_CONCURRENCY,
            builtin_scan: ScanPolicy::default(),
            policy: Policy::default(),
            embeddings: None,
            judge: None,
        }
    }
}

/// Per-tool access rules.
#[derive(Clone, Debug)]
pub struct Policy {
    pub default: Access,
    /// `(pattern, access)`; an exact name wins over patterns, a longer pattern over
    /// a shorter one.
    pub rules: Vec<(String, Access)>,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            default: Access::Allow,
            rules: default_rules(),
        }
    }
}

fn default_rules() -> Vec<(String, Access)> {
    vec![
        ("*browser*".to_owned(), Access::Isolated),
        ("*computer*".to_owned(), Access::Isolated),
    ]
}

impl Policy {
    /// The access of `tool`, and the rule that decided it.
    pub fn access(&self, tool: &str) -> (Access, String) {
        if let Some((p, a)) = self.rules.iter().find(|(p, _)| p == tool) {
            return (*a, format!("policy rule {p:?}"));
        }
        self.rules
            .iter()
            .filter(|(p, _)| p.contains('*') && glob(p, tool))
            .max_by_key(|(p, _)| p.len())
            .map_or_else(
                || (self.default, "policy default".to_owned()),
                |(p, a)| (*a, format!("policy rule {p:?}")),
            )
    }
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters.
pub fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return pattern == name;
    }
    if !name.starts_with(first) || name.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    if !name.ends_with(last) {
        return false;
    }
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

// --- the file

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    servers: BTreeMap<String, ServerFile>,
    #[serde(default)]
    builtin: Option<BuiltinFile>,
    #[serde(default)]
    policy: Option<PolicyFile>,
    list_concurrency: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BuiltinFile {
    #[serde(default)]
    scan: ScanPolicy,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerFile {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    new_tools: NewTools,
    #[serde(default)]
    overlaps: Overlaps,
    #[serde(default)]
    scan: ScanPolicy,
    #[serde(default)]
    allow_hosts: Vec<String>,
    result_max_bytes: Option<usize>,
    /// Per request, e.g. `30s`.
    timeout: Option<String>,
    /// A whole listing, e.g. `10s`.
    list_timeout: Option<String>,
    /// Sessions for calls from MCP clients, one call each at a time.
    sessions: Option<usize>,
    #[serde(default = "yes")]
    relay: bool,
    #[serde(default)]
    roots: RootsPolicy,
    /// trawl's own OAuth credential for an HTTP server.
    auth: Option<AuthFile>,
    /// What `/mcp` shows of this server besides its namespaced tools.
    #[serde(default)]
    expose: Expose,
}

/// `auth:` of a server: exactly one of the two grants. Secrets are named by
/// the environment variable that holds them, never written in the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthFile {
    client_credentials: Option<ClientCredentialsFile>,
    login: Option<LoginFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientCredentialsFile {
    client_id: String,
    client_secret_env: String,
    #[serde(default)]
    scopes: Vec<String>,
    resource: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginFile {
    client_id: Option<String>,
    client_secret_env: Option<String>,
    #[serde(default)]
    scopes: Vec<String>,
}

/// The secret in environment variable `var`.
fn secret_env(var: &str) -> Result<secrecy::SecretString, String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok(secrecy::SecretString::from(v)),
        _ => Err(format!(
            "auth: the environment variable {var} (the client secret) is not set"
        )),
    }
}

impl AuthFile {
    fn checked(self) -> Result<crate::auth::UpstreamAuth, String> {
        use crate::auth::UpstreamAuth;
        Ok(match (self.client_credentials, self.login) {
            (
                Some(ClientCredentialsFile {
                    client_id,
                    client_secret_env,
                    scopes,
                    resource,
                }),
                None,
            ) => {
                if let Some(r) = &resource {
                    trawl_core::resource::ResourceUri::parse(r)
                        .map_err(|e| format!("auth.client_credentials.resource: {e}"))?;
                }
                UpstreamAuth::ClientCredentials {
                    client_id,
                    client_secret: secret_env(&client_secret_env)?,
                    scopes,
                    resource,
                }
            }
            (
                None,
                Some(LoginFile {
                    client_id,
                    client_secret_env,
                    scopes,
                }),
            ) => UpstreamAuth::Login {
                client_secret: client_secret_env.as_deref().map(secret_env).transpose()?,
                client_id,
                scopes,
            },
            _ => return Err("auth: one of client_credentials or login".into()),
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default = "allow")]
    default: Access,
    #[serde(default)]
    tools: BTreeMap<String, Access>,
}

fn allow() -> Access {
    Access::Allow
}

/// The default cap on a tool result given back to a caller.
pub const RESULT_MAX_BYTES: usize = 256 * 1024;
/// The default per-request timeout of an upstream server.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// The default time a whole listing of a server may take. A server started
/// by `npx` that must first download its package can take longer: give it its
/// own `list_timeout`.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(20);
/// The default number of servers a refresh lists at once.
pub const LIST_CONCURRENCY: usize = 8;
fn yes() -> bool {
    true
}

/// Whether a server is given its callers' roots (see
/// [`UpstreamConfig::roots`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RootsPolicy {
    #[default]
    Refuse,
    Forward,
}

/// The default bound on an upstream server's sessions for calls from MCP
/// clients (see [`crate::forward`]).
pub const UPSTREAM_SESSIONS: usize = 8;

impl ToolsConfig {
    /// Keeps `auth: login` grants in `vault`.
    pub fn with_vault(mut self, vault: std::sync::Arc<crate::auth::Vault>) -> ToolsConfig {
        for s in &mut self.servers {
            s.upstream.vault = Some(vault.clone());
        }
        self
    }

    /// Gives the guard a model judge for doubtful definitions.
    pub fn with_judge(mut self, judge: Option<std::sync::Arc<crate::guard::Judge>>) -> ToolsConfig {
        self.judge = judge;
        self
    }

    /// Gives the guard sentence embeddings.
    pub fn with_embeddings(
        mut self,
        embeddings: Option<std::sync::Arc<crate::embed::Embeddings>>,
    ) -> ToolsConfig {
        self.embeddings = embeddings;
        self
    }

    /// The server named `name`.
    pub fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.servers.iter().find(|s| s.name.as_str() == name)
    }

    pub fn load(path: &Path) -> Result<ToolsConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        // Relative commands and working directories are relative to the file.
        let base = base_dir(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        ToolsConfig::parse(&text, &base).map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses the YAML text; every problem is named with its server. Relative
    /// paths in it are relative to `base` (an empty `base` is the current
    /// directory).
    pub fn parse(text: &str, base: &Path) -> Result<ToolsConfig, String> {
        let base = if base.as_os_str().is_empty() {
            Path::new(".")
        } else {
            base
        };
        let file: File = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        let mut servers = Vec::new();
        let mut problems = Vec::new();
        for (name, s) in file.servers {
            match server(&name, s, base) {
                Ok(s) => servers.push(s),
                Err(e) => problems.push(format!("servers.{name}: {e}")),
            }
        }
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        let mut policy = Policy::default();
        if let Some(p) = file.policy {
            policy.default = p.default;
            // Configured rules first: an exact name or a longer pattern wins anyway,
            // and a configured pattern equal to a default one replaces it.
            policy.rules.retain(|(d, _)| !p.tools.contains_key(d));
            policy.rules.extend(p.tools);
        }
        let list_concurrency = match file.list_concurrency {
            Some(0) => return Err("list_concurrency must be at least 1".into()),
            Some(n) => n,
            None => LIST_CONCURRENCY,
        };
        Ok(ToolsConfig {
            servers,
            list_concurrency,
            builtin_scan: file.builtin.map(|b| b.scan).unwrap_or_default(),
            policy,
            embeddings: None,
            judge: None,
        })
    }
}

/// The folder the relative paths of the configuration file at `path` are
/// relative to: the file's folder, made absolute against the current directory
/// (the folder of a bare file name such as `tools.yaml` is the current
/// directory), so a server started in it does not depend on where trawl runs.
pub fn base_dir(path: &Path) -> std::io::Result<PathBuf> {
    let file = std::path::absolute(path)?;
    Ok(file
        .parent()
        .map_or_else(|| file.clone(), Path::to_path_buf))
}

fn server(name: &str, s: ServerFile, base: &Path) -> Result<ServerConfig, String> {
    let server = ServerName::parse(name).map_err(|e: NameError| e.to_string())?;
    if name == BUILTIN_SERVER {
        return Err(format!("{BUILTIN_SERVER} is the built-in server's name"));
    }
    let transport = match (s.command, s.url) {
        (Some(_), None) if s.auth.is_some() => {
            return Err("auth is for HTTP servers (url)".into());
        }
        (Some(command), None) => {
            // A relative path with a slash is relative to the file; a bare program
            // name is looked up in PATH.
            let command = if command.contains('/') && Path::new(&command).is_relative() {
                base.join(&command).to_string_lossy().into_owned()
            } else {
                command
            };
            Transport::Stdio {
                command,
                args: s.args,
                env: s.env,
                cwd: Some(s.cwd.map_or_else(|| base.to_owned(), |c| base.join(c))),
            }
        }
        (None, Some(url)) => {
            let parsed = url::Url::parse(&url).map_err(|e| format!("url {url:?}: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(format!("url {url:?}: http or https"));
            }
            let auth = s
                .auth
                .map(AuthFile::checked)
                .transpose()?
                .unwrap_or_default();
            if !matches!(auth, crate::auth::UpstreamAuth::None)
                && s.headers
                    .keys()
                    .any(|h| h.eq_ignore_ascii_case("authorization"))
            {
                return Err("auth and an Authorization header: one or the other".into());
            }
            Transport::Http {
                url,
                headers: s.headers,
                auth,
            }
        }
        (Some(_), Some(_)) => return Err("command (stdio) or url (HTTP), not both".into()),
        (None, None) => return Err("command (stdio) or url (HTTP) is required".into()),
    };
    let timeout = match s.timeout {
        Some(t) => humantime::parse_duration(&t).map_err(|e| format!("timeout {t:?}: {e}"))?,
        None => UPSTREAM_TIMEOUT,
    };
    let list_timeout = match s.list_timeout {
        Some(t) => humantime::parse_duration(&t).map_err(|e| format!("list_timeout {t:?}: {e}"))?,
        None => LIST_TIMEOUT,
    };
    let sessions = match s.sessions {
        Some(0) => return Err("sessions must be at least 1".into()),
        Some(n) => n,
        None => UPSTREAM_SESSIONS,
    };
    Ok(ServerConfig {
        upstream: UpstreamConfig {
            server: name.to_owned(),
            transport,
            timeout,
            sessions,
            relay: s.relay,
            roots: s.roots == RootsPolicy::Forward,
            vault: None,
            list_changed: None,
        },
        name: server,
        new_tools: s.new_tools,
        overlaps: s.overlaps,
        scan: s.scan,
        allow_hosts: s.allow_hosts,
        result_max_bytes: s.result_max_bytes.unwrap_or(RESULT_MAX_BYTES),
        expose: s.expose,
        list_timeout,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn upstream_auth_is_checked_and_keeps_secrets_out_of_the_file() {
        let base = Path::new(".");
        let parse = |auth: &str| {
            ToolsConfig::parse(
                &format!(
                    "servers:\n  up:\n    url: https://up.example.com/mcp\n    auth: {auth}\n"
                ),
                base,
            )
        };
        let e = parse(
            "{client_credentials: {client_id: c, client_secret_env: TRAWL_TEST_UNSET_SECRET_9F}}",
        )
        .unwrap_err();
        assert!(
            e.contains("TRAWL_TEST_UNSET_SECRET_9F") && e.contains("not set"),
            "{e}"
        );
        let e = parse("{login: {}, client_credentials: {client_id: c, client_secret_env: X}}")
            .unwrap_err();
        assert!(e.contains("one of"), "{e}");
        let e = parse("{login: {client_secret: inline}}").unwrap_err();
        assert!(e.contains("client_secret"), "{e}");
        let cfg = parse("{login: {client_id: app, scopes: [a, b]}}").unwrap();
        let Transport::Http { auth, .. } = &cfg.servers[0].upstream.transport else {
            panic!("http");
        };
        assert!(
            matches!(auth, crate::auth::UpstreamAuth::Login { client_id: Some(id), scopes, .. }
            if id == "app" && scopes == &["a", "b"])
        );
        let e = ToolsConfig::parse(
            "servers:\n  up:\n    command: node\n    auth: {login: {}}\n",
            base,
        )
        .unwrap_err();
        assert!(e.contains("HTTP"), "{e}");
        let e = ToolsConfig::parse(
            "servers:\n  up:\n    url: https://up.example.com/mcp\n    headers: {Authorization: Bearer x}\n    auth: {login: {}}\n",
            base,
        )
        .unwrap_err();
        assert!(e.contains("one or the other"), "{e}");
    }

    #[test]
    fn relative_paths_resolve_against_the_current_directory_then_the_file() {
        let here = std::env::current_dir().unwrap();
        // A bare file name is in the current directory (its parent is "", which
        // no process can be started in).
        assert_eq!(base_dir(Path::new("tools.yaml")).unwrap(), here);
        assert_eq!(base_dir(Path::new("./tools.yaml")).unwrap(), here);
        assert_eq!(
            base_dir(Path::new("conf/tools.yaml")).unwrap(),
            here.join("conf")
        );
        assert_eq!(
            base_dir(Path::new("/etc/trawl/tools.yaml")).unwrap(),
            Path::new("/etc/trawl")
        );

        let text = "servers:\n  a:\n    command: node\n    args: [srv/index.js]\n  \
                    b:\n    command: bin/srv\n    cwd: work\n    args: [x.js]\n  \
                    c:\n    command: /usr/bin/env\n    cwd: /srv\n";
        let stdio = |cfg: &ToolsConfig, i: usize| match &cfg.servers[i].upstream.transport {
            Transport::Stdio {
                command, args, cwd, ..
            } => (command.clone(), args.clone(), cwd.clone().unwrap()),
            Transport::Http { .. } => panic!("stdio"),
        };
        let base = base_dir(Path::new("tools.yaml")).unwrap();
        let cfg = ToolsConfig::parse(text, &base).unwrap();
        // No cwd: the file's folder, where the relative args are found.
        assert_eq!(
            stdio(&cfg, 0),
            ("node".into(), vec!["srv/index.js".into()], here.clone())
        );
        // A relative command is relative to the file; a relative cwd too.
        assert_eq!(
            stdio(&cfg, 1),
            (
                here.join("bin/srv").to_string_lossy().into_owned(),
                vec!["x.js".into()],
                here.join("work")
            )
        );
        assert_eq!(stdio(&cfg, 2).2, Path::new("/srv"));
        // An empty base (the parent of a bare name) is the current directory,
        // never a working directory of "".
        let cfg = ToolsConfig::parse(text, Path::new("")).unwrap();
        assert_eq!(stdio(&cfg, 0).2, Path::new("."));
        assert_eq!(stdio(&cfg, 1).2, Path::new("./work"));
    }

    #[test]
    fn globs_match_runs_of_characters() {
        assert!(glob("*browser*", "pw.browser_click"));
        assert!(glob("*.send_*", "mail.send_message"));
        assert!(!glob("*.send_*", "mail.resend"));
        assert!(glob("a*", "a"));
        assert!(!glob("a*b", "ab_c"));
        assert!(glob("exact", "exact"));
    }

    #[test]
    fn policy_rules_exact_then_longest_pattern_then_default() {
        let cfg = ToolsConfig::parse(
            "policy:\n  default: deny\n  tools:\n    \"up.*\": allow\n    \"up.send_*\": approve\n    up.send_now: deny\n",
            Path::new("."),
        )
        .unwrap();
        let p = &cfg.policy;
        assert_eq!(p.access("up.read").0, Access::Allow);
        assert_eq!(p.access("up.send_mail").0, Access::Approve);
        assert_eq!(p.access("up.send_now").0, Access::Deny);
        assert_eq!(p.access("other.x").0, Access::Deny);
        assert_eq!(p.access("up.browser_open").0, Access::Isolated);
    }

    #[test]
    fn servers_are_checked_and_named_in_errors() {
        let cfg = ToolsConfig::parse(
            "servers:\n  a:\n    command: node\n    args: [x.js]\n    new_tools: approve\n    overlaps: allow\n    scan: {medium: block}\n  b:\n    url: http://127.0.0.1:9/mcp\n",
            Path::new("/etc/trawl"),
        )
        .unwrap();
        assert_eq!(cfg.servers.len(), 2);
        assert_eq!(cfg.servers[0].new_tools, NewTools::Approve);
        assert_eq!(cfg.servers[0].overlaps, Overlaps::Allow);
        assert_eq!(cfg.servers[1].overlaps, Overlaps::Hold);
        assert_eq!(cfg.servers[0].scan.medium, ScanAction::Block);
        assert_eq!(cfg.servers[0].scan.high, ScanAction::Block);
        let e = ToolsConfig::parse(
            "servers:\n  brightdata:\n    command: x\n  bad.name:\n    command: x\n  c: {}\n  d:\n    url: ftp://x\n",
            Path::new("."),
        )
        .unwrap_err();
        for part in [
            "servers.brightdata",
            "servers.bad.name",
            "servers.c: command",
            "servers.d: url",
        ] {
            assert!(e.contains(part), "{part} in {e}");
        }
        assert!(ToolsConfig::parse("servers:\n  a:\n    comand: x\n", Path::new(".")).is_err());
    }
}
