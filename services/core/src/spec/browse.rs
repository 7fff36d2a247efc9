//! The `browse` section: browser sessions run by written-down steps, with model
//! steps only where a step cannot be written down.
//!
//! ```yaml
//! browse:
//!   urls: [https://portal.example/login]
//!   geos: [us]
//!   step_timeout: 10s           # default for every step
//!   model: claude-sonnet-4-5    # for act / extract-by-instruction / observe
//!   steps:
//!     - fill: {selector: "#user", value: "ops@example.com"}
//!     - fill: {selector: "#password", secret: portal_password}
//!     - click: "button[type=submit]"
//!     - wait_for: {selector: "table#orders", timeout: 5s}
//!     - extract: {rows: "table#orders tbody tr", fields: {...}, next: "a.next", max_pages: 10}
//!     - act: "choose the 512 GB option"
//!     - extract: "the price shown after choosing it"
//!       schema: {type: object, properties: {price: {type: number}}}
//!     - screenshot: after-choice
//! ```
//!
//! Each slice opens its start URL, then runs the steps in order. A secret is named,
//! never written in the spec: the worker reads it from its own configuration.

use std::time::Duration;

use serde_json::Value;

use super::{Checker, ExtractSpec, MAX_MAX_TOKENS, MAX_MODEL_CHARS, MIN_MAX_TOKENS, fields, kind};
use crate::geo::Geo;
use crate::model::normalize_url;

/// Browser sessions: one slice per (url, geo), each running `steps`.
#[derive(Clone, Debug)]
pub struct Browse {
    /// Normalized absolute start URLs.
    pub urls: Vec<String>,
    pub geos: Vec<Geo>,
    pub steps: Vec<Step>,
    /// The model of the model steps, `provider:name` or a bare name; `None`: the
    /// deployment's default.
    pub model: Option<String>,
    /// Output tokens per model turn.
    pub max_tokens: u32,
}

impl Browse {
    /// Whether a step needs a model.
    pub fn has_model_steps(&self) -> bool {
        self.steps.iter().any(|s| s.action.is_model())
    }
}

/// One step and how long it may take.
#[derive(Clone, Debug)]
pub struct Step {
    pub action: Action,
    pub timeout: Duration,
}

/// What a step does.
#[derive(Clone, Debug)]
pub enum Action {
    Goto {
        url: String,
    },
    Fill {
        selector: String,
        value: FillValue,
    },
    Click {
        selector: String,
    },
    /// Chooses the `<option>` whose value or label is `value`.
    Select {
        selector: String,
        value: String,
    },
    WaitFor(WaitFor),
    Scroll(ScrollUntil),
    /// Items from the live page with the page-extraction sources.
    Extract(RowsExtract),
    Screenshot {
        name: String,
    },
    /// A model picks the element to act on from a snapshot of the page.
    Act {
        instruction: String,
    },
    /// A model picks, per field of `schema`, the element holding its value.
    ModelExtract {
        instruction: String,
        schema: Value,
    },
    /// A model lists the elements matching a description.
    Observe {
        instruction: String,
    },
}

impl Action {
    pub fn name(&self) -> &'static str {
        match self {
            Action::Goto { .. } => "goto",
            Action::Fill { .. } => "fill",
            Action::Click { .. } => "click",
            Action::Select { .. } => "select",
            Action::WaitFor(_) => "wait_for",
            Action::Scroll(_) => "scroll",
            Action::Extract(_) | Action::ModelExtract { .. } => "extract",
            Action::Screenshot { .. } => "screenshot",
            Action::Act { .. } => "act",
            Action::Observe { .. } => "observe",
        }
    }

    /// Whether a model runs the step.
    pub fn is_model(&self) -> bool {
        matches!(
            self,
            Action::Act { .. } | Action::ModelExtract { .. } | Action::Observe { .. }
        )
    }
}

/// What a `fill` types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FillValue {
    Text(String),
    /// The name of a secret in the worker's configuration.
    Secret(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitFor {
    Selector(String),
    Text(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScrollUntil {
    /// Scroll until an element matches (content that loads on scroll).
    Selector(String),
    /// Scroll a page height this many times.
    Times(u32),
}

/// An `extract` step: one item per element of `rows` (or one for the page), on
/// every page reached through `next`.
#[derive(Clone, Debug)]
pub struct RowsExtract {
    pub rows: Option<String>,
    pub fields: ExtractSpec,
    /// The "next page" control, clicked after each page while it is there.
    pub next: Option<String>,
    pub max_pages: u32,
}

pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_STEP_TIMEOUT: Duration = Duration::from_secs(300);
pub const MAX_STEPS: usize = 100;
pub const MAX_PAGES: u64 = 1000;
/// The most page heights a `scroll` step scrolls.
pub const MAX_SCROLL_TIMES: u64 = 1000;
/// The longest screenshot name.
pub const MAX_SCREENSHOT_NAME: usize = 64;
/// The longest instruction of a model step, in characters.
pub const MAX_INSTRUCTION_CHARS: usize = 2000;

const ACTIONS: &[&str] = &[
    "goto",
    "fill",
    "click",
    "select",
    "wait_for",
    "scroll",
    "extract",
    "screenshot",
    "act",
    "observe",
];

impl Checker {
    pub(super) fn browse(&mut self, v: &Value) -> Option<Browse> {
        let f = self.object(v, "browse", fields::BROWSE)?;
        let mut urls: Vec<String> = Vec::new();
        match f.get("urls") {
            None => self.err("browse.urls", "required: the pages each session starts on"),
            Some(u) => {
                if let Some(list) = self.list(u, "browse.urls") {
                    if list.is_empty() {
                        self.err("browse.urls", "must list at least one URL");
                    }
                    for (i, u) in list.iter().enumerate() {
                        let p = format!("browse.urls[{i}]");
                        if let Some(s) = self.line(u, &p) {
                            match normalize_url(&s) {
                                Ok(n) if !urls.contains(&n) => urls.push(n),
                                Ok(_) => {}
                                Err(e) => self.err(p, e),
                            }
                        }
                    }
                }
            }
        }
        let geos = self.geos(f.get("geos"), "browse.geos");
        let step_timeout = f
            .get("step_timeout")
            .and_then(|t| self.step_timeout(t, "browse.step_timeout"))
            .unwrap_or(DEFAULT_STEP_TIMEOUT);
        let model = f.get("model").and_then(|m| {
            let m = self.line(m, "browse.model")?;
            if m.chars().count() > MAX_MODEL_CHARS {
                self.err(
                    "browse.model",
                    format!("must be a model name of 1 to {MAX_MODEL_CHARS} characters"),
                );
                return None;
            }
            Some(m.trim().to_owned())
        });
        let max_tokens = f
            .get("max_tokens")
            .map_or(Some(1024), |n| {
                self.uint(n, "browse.max_tokens", MIN_MAX_TOKENS, MAX_MAX_TOKENS)
            })
            .unwrap_or(1024) as u32;
        let mut steps = Vec::new();
        match f.get("steps") {
            None => self.err("browse.steps", "required: what each session does"),
            Some(s) => {
                if let Some(list) = self.list(s, "browse.steps") {
                    if list.is_empty() {
                        self.err("browse.steps", "must list at least one step");
                    }
                    if list.len() > MAX_STEPS {
                        self.err(
                            "browse.steps",
                            format!("has {} steps; the limit is {MAX_STEPS}", list.len()),
                        );
                    }
                    for (i, s) in list.iter().enumerate() {
                        if let Some(step) =
                            self.step(s, &format!("browse.steps[{i}]"), step_timeout)
                        {
                            steps.push(step);
                        }
                    }
                }
            }
        }
        Some(Browse {
            urls,
            geos,
            steps,
            model,
            max_tokens,
        })
    }

    fn step_timeout(&mut self, v: &Value, path: &str) -> Option<Duration> {
        let d = self.duration(v, path)?;
        if d.is_zero() || d > MAX_STEP_TIMEOUT {
            self.err(
                path,
                format!("must be more than 0 and at most {MAX_STEP_TIMEOUT:?}"),
            );
            return None;
        }
        Some(d)
    }

    fn step(&mut self, v: &Value, path: &str, default_timeout: Duration) -> Option<Step> {
        // `- screenshot` alone.
        if v.as_str() == Some("screenshot") {
            return Some(Step {
                action: Action::Screenshot {
                    name: "screenshot".into(),
                },
                timeout: default_timeout,
            });
        }
        let Some(map) = v.as_object() else {
            self.err(
                path,
                format!(
                    "must be a mapping with one action ({}), not {}",
                    ACTIONS.join(", "),
                    kind(v)
                ),
            );
            return None;
        };
        let actions: Vec<&str> = map
            .keys()
            .map(String::as_str)
            .filter(|k| ACTIONS.contains(k))
            .collect();
        let name = match actions.as_slice() {
            [one] => *one,
            [] => {
                self.err(
                    path,
                    format!("has no action: give one of {}", ACTIONS.join(", ")),
                );
                return None;
            }
            many => {
                self.err(
                    path,
                    format!(
                        "has {} actions ({}); give one per step",
                        many.len(),
                        many.join(", ")
                    ),
                );
                return None;
            }
        };
        let model_extract = name == "extract" && map.get("extract").is_some_and(Value::is_string);
        for k in map.keys() {
            let allowed = k == name || k == "timeout" || (k == "schema" && model_extract);
            if !allowed {
                self.err(
                    format!("{path}.{k}"),
                    if k == "schema" {
                        "schema goes with an extract given as an instruction".to_owned()
                    } else {
                        format!("unknown field next to {name}; a step has one action and may have a timeout")
                    },
                );
            }
        }
        let timeout = match map.get("timeout") {
            Some(t) => self.step_timeout(t, &format!("{path}.timeout"))?,
            None => default_timeout,
        };
        // `wait_for: {selector, timeout}` sets the step's timeout too.
        let mut wait_timeout = None;
        let body = &map[name];
        let at = format!("{path}.{name}");
        let action = match name {
            "goto" => {
                let url = self.line(body, &at)?;
                match normalize_url(&url) {
                    Ok(url) => Action::Goto { url },
                    Err(e) => {
                        self.err(at, e);
                        return None;
                    }
                }
            }
            "fill" => {
                let f = self.object(body, &at, fields::FILL)?;
                let selector = self.selector(f.get("selector"), &f.path("selector"))?;
                let value = match (f.get("value"), f.get("secret")) {
                    (Some(v), None) => {
                        let text = match v.as_str() {
                            Some(s) if s.chars().any(super::is_refused_control) => {
                                self.err(
                                    f.path("value"),
                                    "must not contain control characters (U+0000 to U+001F other than tab, newline and carriage return, or U+007F)",
                                );
                                return None;
                            }
                            Some(s) => s.to_owned(),
                            None => {
                                self.err(
                                    f.path("value"),
                                    format!("must be a string, not {}", kind(v)),
                                );
                                return None;
                            }
                        };
                        if selector.to_ascii_lowercase().contains("password") {
                            self.err(
                                f.path("value"),
                                "a password is never written in the spec: name a secret (secret: NAME) the worker's configuration holds",
                            );
                            return None;
                        }
                        FillValue::Text(text)
                    }
                    (None, Some(s)) => {
                        let name = self.string(s, &f.path("secret"))?;
                        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                            self.err(
                                f.path("secret"),
                                "a secret name uses only letters, digits and _",
                            );
                            return None;
                        }
                        FillValue::Secret(name)
                    }
                    (Some(_), Some(_)) => {
                        self.err(&at, "give value or secret, not both");
                        return None;
                    }
                    (None, None) => {
                        self.err(&at, "required: value (text) or secret (a secret's name)");
                        return None;
                    }
                };
                Action::Fill { selector, value }
            }
            "click" => Action::Click {
                selector: self.selector_or_mapping(body, &at)?,
            },
            "select" => {
                let f = self.object(body, &at, fields::SELECT)?;
                let selector = self.selector(f.get("selector"), &f.path("selector"))?;
                let value = match f.get("value") {
                    Some(v) => self.string(v, &f.path("value"))?,
                    None => {
                        self.err(f.path("value"), "required: the option's value or label");
                        return None;
                    }
                };
                Action::Select { selector, value }
            }
            "wait_for" => {
                if body.is_string() {
                    Action::WaitFor(WaitFor::Selector(self.selector(Some(body), &at)?))
                } else {
                    let f = self.object(body, &at, fields::WAIT_FOR)?;
                    if let Some(t) = f.get("timeout") {
                        wait_timeout = self.step_timeout(t, &f.path("timeout"));
                    }
                    match (f.get("selector"), f.get("text")) {
                        (Some(s), None) => Action::WaitFor(WaitFor::Selector(
                            self.selector(Some(s), &f.path("selector"))?,
                        )),
                        (None, Some(t)) => {
                            Action::WaitFor(WaitFor::Text(self.string(t, &f.path("text"))?))
                        }
                        _ => {
                            self.err(&at, "give exactly one of selector or text");
                            return None;
                        }
                    }
                }
            }
            "scroll" => {
                let f = self.object(body, &at, fields::SCROLL)?;
                match (f.get("until"), f.get("times")) {
                    (Some(s), None) => Action::Scroll(ScrollUntil::Selector(
                        self.selector(Some(s), &f.path("until"))?,
                    )),
                    (None, Some(n)) => Action::Scroll(ScrollUntil::Times(self.uint(
                        n,
                        &f.path("times"),
                        1,
                        MAX_SCROLL_TIMES,
                    )?
                        as u32)),
                    _ => {
                        self.err(&at, "give exactly one of until (a selector) or times");
                        return None;
                    }
                }
            }
            "extract" if model_extract => {
                let instruction = self.string(body, &at)?;
                let schema = match map.get("schema") {
                    Some(s) => self.step_schema(s, &format!("{path}.schema"))?,
                    None => {
                        self.err(
                            format!("{path}.schema"),
                            "required with an instruction: a JSON Schema object whose properties are the fields",
                        );
                        return None;
                    }
                };
                Action::ModelExtract {
                    instruction,
                    schema,
                }
            }
            "extract" => {
                let f = self.object(body, &at, fields::ROWS_EXTRACT)?;
                let rows = match f.get("rows") {
                    Some(r) => Some(self.selector(Some(r), &f.path("rows"))?),
                    None => None,
                };
                let next = match f.get("next") {
                    Some(n) => Some(self.selector(Some(n), &f.path("next"))?),
                    None => None,
                };
                let max_pages = f
                    .get("max_pages")
                    .map_or(Some(if next.is_some() { 50 } else { 1 }), |n| {
                        self.uint(n, &f.path("max_pages"), 1, MAX_PAGES)
                    })? as u32;
                let fields = self.extract_fields(f.get("fields"), &f.path("fields"))?;
                Action::Extract(RowsExtract {
                    rows,
                    fields,
                    next,
                    max_pages,
                })
            }
            "screenshot" => {
                let name = match body {
                    Value::Null => "screenshot".to_owned(),
                    Value::String(s) => s.clone(),
                    other => {
                        let f = self.object(other, &at, fields::SCREENSHOT)?;
                        match f.get("name") {
                            Some(n) => self.string(n, &f.path("name"))?,
                            None => "screenshot".to_owned(),
                        }
                    }
                };
                if name.is_empty()
                    || name.len() > MAX_SCREENSHOT_NAME
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                {
                    self.err(
                        at,
                        format!("a screenshot's name has 1 to {MAX_SCREENSHOT_NAME} letters, digits, _ and -"),
                    );
                    return None;
                }
                Action::Screenshot { name }
            }
            "act" => Action::Act {
                instruction: self.instruction(body, &at)?,
            },
            "observe" => Action::Observe {
                instruction: self.instruction(body, &at)?,
            },
            _ => unreachable!("every action in ACTIONS is handled"),
        };
        Some(Step {
            action,
            timeout: wait_timeout.unwrap_or(timeout),
        })
    }

    fn instruction(&mut self, v: &Value, path: &str) -> Option<String> {
        let s = self.string(v, path)?;
        if s.chars().count() > MAX_INSTRUCTION_CHARS {
            self.err(
                path,
                format!("must be at most {MAX_INSTRUCTION_CHARS} characters"),
            );
            return None;
        }
        Some(s.trim().to_owned())
    }

    /// A selector given alone (`click: "#go"`) or as `{selector: ...}`.
    fn selector_or_mapping(&mut self, v: &Value, path: &str) -> Option<String> {
        if v.is_string() {
            return self.selector(Some(v), path);
        }
        let f = self.object(v, path, fields::SELECTOR)?;
        self.selector(f.get("selector"), &f.path("selector"))
    }

    /// A CSS selector, checked for syntax.
    fn selector(&mut self, v: Option<&Value>, path: &str) -> Option<String> {
        let Some(v) = v else {
            self.err(path, "required: a CSS selector");
            return None;
        };
        let s = self.string(v, path)?;
        match scraper::Selector::parse(&s) {
            Ok(_) => Some(s),
            Err(e) => {
                self.err(path, format!("\"{s}\" is not a CSS selector: {e}"));
                None
            }
        }
    }

    /// A model extract's schema: an object schema naming its fields, each a
    /// string, number, integer or boolean.
    fn step_schema(&mut self, v: &Value, path: &str) -> Option<Value> {
        let props = v.get("properties").and_then(Value::as_object);
        let Some(props) = props.filter(|p| !p.is_empty()) else {
            self.err(
                path,
                "must be a JSON Schema object with properties (the fields to extract)",
            );
            return None;
        };
        for (name, p) in props {
            let ty = p.get("type").and_then(Value::as_str);
            if !matches!(ty, Some("string" | "number" | "integer" | "boolean")) {
                self.err(
                    format!("{path}.properties.{name}.type"),
                    "must be string, number, integer or boolean",
                );
                return None;
            }
        }
        match crate::validate::ItemValidator::new(v) {
            Ok(_) => Some(v.clone()),
            Err(e) => {
                self.err(path, e);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::{Action, FillValue, JobSpec, ScrollUntil, WaitFor};
    use std::time::Duration;

    fn parse(steps: &str) -> Result<JobSpec, crate::spec::SpecErrors> {
        JobSpec::parse(&format!(
            "name: b\nbrowse:\n  urls: [\"https://portal.example/login\"]\n  geos: [us, de]\n  step_timeout: 5s\n  steps:\n{steps}"
        ))
    }

    #[test]
    fn every_step_kind_parses_with_its_timeout() {
        let spec = parse(
            r##"    - fill: {selector: "#user", value: ops}
    - fill: {selector: "#pw", secret: portal_pw}
    - click: "button[type=submit]"
    - select: {selector: "#size", value: "512 GB"}
    - wait_for: {text: Orders, timeout: 20s}
    - scroll: {times: 3}
    - scroll: {until: ".row:nth-child(50)"}
    - extract: {rows: "tr", next: "a.next", fields: {id: {css: .id}}}
    - screenshot
    - act: "choose the 512 GB option"
    - extract: "the price"
      schema: {type: object, properties: {price: {type: number}}}
      timeout: 30s
    - observe: "the buttons"
"##,
        )
        .unwrap();
        let b = spec.browse.as_ref().unwrap();
        assert_eq!(spec.browse_slices(), 2);
        assert!(b.has_model_steps());
        let names: Vec<&str> = b.steps.iter().map(|s| s.action.name()).collect();
        assert_eq!(
            names,
            [
                "fill",
                "fill",
                "click",
                "select",
                "wait_for",
                "scroll",
                "scroll",
                "extract",
                "screenshot",
                "act",
                "extract",
                "observe"
            ]
        );
        assert!(
            matches!(&b.steps[1].action, Action::Fill { value: FillValue::Secret(s), .. } if s == "portal_pw")
        );
        assert!(matches!(&b.steps[4].action, Action::WaitFor(WaitFor::Text(t)) if t == "Orders"));
        assert_eq!(b.steps[4].timeout, Duration::from_secs(20));
        assert_eq!(b.steps[0].timeout, Duration::from_secs(5));
        assert!(matches!(
            b.steps[5].action,
            Action::Scroll(ScrollUntil::Times(3))
        ));
        assert!(
            matches!(&b.steps[7].action, Action::Extract(x) if x.max_pages == 50 && x.rows.as_deref() == Some("tr"))
        );
        assert!(matches!(&b.steps[10].action, Action::ModelExtract { .. }));
        assert_eq!(b.steps[10].timeout, Duration::from_secs(30));
    }

    #[test]
    fn bad_steps_are_reported_with_their_paths() {
        let e = parse(
            r##"    - fill: {selector: "#password", value: hunter2}
    - click: "div[["
    - teleport: "#x"
    - {click: "#a", act: "b"}
    - extract: "the price"
    - scroll: {}
    - wait_for: {selector: "#a", timeout: 0s}
"##,
        )
        .unwrap_err();
        let paths = e.paths();
        assert!(paths.contains(&"browse.steps[0].fill.value"), "{e}");
        assert!(paths.contains(&"browse.steps[1].click"), "{e}");
        assert!(paths.contains(&"browse.steps[2]"), "{e}");
        assert!(paths.contains(&"browse.steps[3]"), "{e}");
        assert!(paths.contains(&"browse.steps[4].schema"), "{e}");
        assert!(paths.contains(&"browse.steps[5].scroll"), "{e}");
        assert!(paths.contains(&"browse.steps[6].wait_for.timeout"), "{e}");
        let text = e.to_string();
        assert!(text.contains("never written in the spec"), "{text}");
        assert!(text.contains("not a CSS selector"), "{text}");
    }

    #[test]
    fn a_browse_section_needs_urls_geos_and_steps() {
        let e = JobSpec::parse("name: b\nbrowse: {urls: [], steps: []}\n").unwrap_err();
        let paths = e.paths();
        assert!(paths.contains(&"browse.urls"), "{e}");
        assert!(paths.contains(&"browse.geos"), "{e}");
        assert!(paths.contains(&"browse.steps"), "{e}");
    }
}
