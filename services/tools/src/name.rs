//! Tool and server names.
//!
//! A tool's name follows the MCP rule (1–128 characters of `[A-Za-z0-9_.-]`,
//! case-sensitive) after it is namespaced by its server: `everything.echo`. A
//! server name has no dot, so the first dot of a tool's name always separates the
//! server from the tool's own name, and two servers can never offer the same name.

use std::fmt;

/// The longest tool name MCP allows.
pub const MAX_TOOL_NAME: usize = 128;
/// The longest server name: short enough to leave room for the tool's own name.
pub const MAX_SERVER_NAME: usize = 32;

/// Why a name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("tool name {0:?}: empty")]
    Empty(String),
    #[error("tool name {name:?}: {len} characters, more than {MAX_TOOL_NAME}")]
    TooLong { name: String, len: usize },
    #[error("tool name {name:?}: {ch:?} is not one of A-Z a-z 0-9 _ . -")]
    BadChar { name: String, ch: char },
    #[error("server name {0:?}: 1 to {MAX_SERVER_NAME} characters of A-Z a-z 0-9 _ -, no dot")]
    BadServer(String),
}

fn check(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty(name.into()));
    }
    let len = name.chars().count();
    if len > MAX_TOOL_NAME {
        return Err(NameError::TooLong {
            name: preview(name),
            len,
        });
    }
    if let Some(ch) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(NameError::BadChar {
            name: preview(name),
            ch,
        });
    }
    Ok(())
}

/// A long name cut for an error message.
fn preview(name: &str) -> String {
    match name.char_indices().nth(48) {
        Some((i, _)) => format!("{}…", &name[..i]),
        None => name.to_owned(),
    }
}

/// A server's name, checked.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerName(String);

impl ServerName {
    pub fn parse(s: &str) -> Result<ServerName, NameError> {
        let ok = !s.is_empty()
            && s.len() <= MAX_SERVER_NAME
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
        if ok {
            Ok(ServerName(s.to_owned()))
        } else {
            Err(NameError::BadServer(s.to_owned()))
        }
    }

    /// The built-in tools' server, [`BUILTIN_SERVER`](crate::config::BUILTIN_SERVER).
    pub fn builtin() -> ServerName {
        ServerName(crate::config::BUILTIN_SERVER.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A namespaced tool name, checked: `server.tool`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ToolName(String);

impl ToolName {
    /// A full name as a caller gives it (`everything.echo`).
    pub fn parse(s: &str) -> Result<ToolName, NameError> {
        check(s)?;
        match s.split_once('.') {
            Some((server, rest)) if !rest.is_empty() => {
                ServerName::parse(server)?;
                Ok(ToolName(s.to_owned()))
            }
            _ => Err(NameError::BadServer(String::new())),
        }
    }

    /// The name of `bare`, a tool of `server` as the server lists it.
    pub fn namespaced(server: &ServerName, bare: &str) -> Result<ToolName, NameError> {
        check(bare)?;
        let full = format!("{server}.{bare}");
        check(&full)?;
        Ok(ToolName(full))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The server part.
    pub fn server(&self) -> &str {
        self.0.split_once('.').map_or("", |(s, _)| s)
    }

    /// The tool's own name, as its server knows it.
    pub fn bare(&self) -> &str {
        self.0.split_once('.').map_or("", |(_, b)| b)
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_mcp_rule_after_namespacing() {
        let s = ServerName::parse("everything").unwrap();
        let t = ToolName::namespaced(&s, "get-sum_2.v1").unwrap();
        assert_eq!(
            (t.as_str(), t.server(), t.bare()),
            ("everything.get-sum_2.v1", "everything", "get-sum_2.v1")
        );
        assert!(matches!(
            ToolName::namespaced(&s, ""),
            Err(NameError::Empty(_))
        ));
        assert!(matches!(
            ToolName::namespaced(&s, "has space"),
            Err(NameError::BadChar { ch: ' ', .. })
        ));
        assert!(matches!(
            ToolName::namespaced(&s, "ünicode"),
            Err(NameError::BadChar { ch: 'ü', .. })
        ));
        // 118 + "everything." = 129: over the limit once namespaced.
        let long = "a".repeat(118);
        let e = ToolName::namespaced(&s, &long).unwrap_err();
        assert!(matches!(e, NameError::TooLong { len: 129, .. }), "{e}");
        assert!(ToolName::namespaced(&s, &"a".repeat(117)).is_ok());
    }

    #[test]
    fn server_names_have_no_dot() {
        assert_eq!(
            ServerName::parse(crate::config::BUILTIN_SERVER).unwrap(),
            ServerName::builtin()
        );
        assert!(ServerName::parse("my-server_1").is_ok());
        for bad in ["", "a.b", "white space", &"s".repeat(33)] {
            assert!(ServerName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(ToolName::parse("brightdata.web_search").is_ok());
        assert!(ToolName::parse("noserver").is_err());
        assert!(ToolName::parse("a.b.c").is_ok());
    }
}
