//! Tool names as a model may see them, and back.

use std::collections::{BTreeMap, HashMap};

use trawl_tools::TOOL_SEARCH;

use super::{RUN_CODE, SUBMIT_FINDINGS, SUBMIT_PLAN};

/// Model-safe tool names (`^[a-zA-Z0-9_-]{1,64}$`, the rule of both wires) and
/// back: Bright Data's tools by their bare names (`web_search`), other servers'
/// as `server__tool`; a name that would collide or run long gets a hash suffix.
#[derive(Clone, Debug, Default)]
pub struct WireNames {
    to_catalog: BTreeMap<String, String>,
    to_wire: HashMap<String, String>,
}

impl WireNames {
    pub fn insert(&mut self, catalog: &str) -> String {
        if let Some(w) = self.to_wire.get(catalog) {
            return w.clone();
        }
        let base = match catalog.split_once('.') {
            Some(("brightdata", tool)) => tool.to_owned(),
            Some((server, tool)) => format!("{server}__{tool}"),
            None => catalog.to_owned(),
        };
        let mut wire: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let reserved = [TOOL_SEARCH, RUN_CODE, SUBMIT_FINDINGS, SUBMIT_PLAN];
        if wire.len() > 64
            || self.to_catalog.contains_key(&wire)
            || reserved.contains(&wire.as_str())
        {
            let d = trawl_core::digest(&[catalog]);
            wire.truncate(55);
            wire = format!("{wire}_{}", &d[..8]);
        }
        self.to_catalog.insert(wire.clone(), catalog.to_owned());
        self.to_wire.insert(catalog.to_owned(), wire.clone());
        wire
    }

    pub fn wire(&self, catalog: &str) -> String {
        self.to_wire
            .get(catalog)
            .cloned()
            .unwrap_or_else(|| catalog.to_owned())
    }

    pub fn catalog(&self, wire: &str) -> Option<&str> {
        self.to_catalog.get(wire).map(String::as_str)
    }

    pub(super) fn knows(&self, catalog: &str) -> bool {
        self.to_wire.contains_key(catalog)
    }

    pub(super) fn wires(&self) -> impl Iterator<Item = &str> {
        self.to_catalog.keys().map(String::as_str)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_model_safe_and_reversible() {
        let mut n = WireNames::default();
        assert_eq!(n.insert("brightdata.web_search"), "web_search");
        assert_eq!(n.insert("files.read.text"), "files__read_text");
        let long = format!("srv.{}", "x".repeat(120));
        let w = n.insert(&long);
        assert!(w.len() <= 64, "{w}");
        assert_eq!(n.catalog(&w), Some(long.as_str()));
        // A second tool that maps to the same wire name gets its own.
        let w2 = n.insert("files.read_text");
        assert_ne!(w2, "files__read_text");
        assert_eq!(n.catalog(&w2), Some("files.read_text"));
        assert_eq!(n.catalog("files__read_text"), Some("files.read.text"));
    }
}
