//! Parameters that ask for the model's context or for local secrets, judged on
//! their names (their descriptions are text fields like any other).

use super::*;

/// Parameter names (lower case, separators removed) that ask for the model's
/// context: a tool has no use for the conversation or a "sidenote" about it.
const CONTEXT_NAMES: &[&str] = &[
    "conversation",
    "conversationhistory",
    "conversationlog",
    "fullconversation",
    "chathistory",
    "chatlog",
    "messagehistory",
    "previousmessages",
    "priormessages",
    "allmessages",
    "pastmessages",
    "fullcontext",
    "contextwindow",
    "sidenote",
    "sidenotes",
    "yourinstructions",
    "assistantinstructions",
    "modelinstructions",
    "originalprompt",
    "originalinstructions",
    "initialprompt",
];

/// Context names that tools calling a model of their own legitimately take
/// ("system_prompt" of an LLM proxy): a flag only.
const CONTEXT_NAMES_WEAK: &[&str] = &[
    "systemprompt",
    "systemmessage",
    "modelname",
    "llmname",
    "aimodel",
    "assistantname",
    "modelidentity",
];

/// Parameter names for secrets that live on the user's machine, not in a service
/// the tool talks to.
const SECRET_NAMES: &[&str] = &[
    "sshkey",
    "sshprivatekey",
    "idrsa",
    "privatekeyfile",
    "seedphrase",
    "mnemonic",
    "recoveryphrase",
    "walletseed",
    "envvars",
    "environmentvariables",
    "envfile",
    "dotenv",
    "envcontents",
    "browsercookies",
    "sessioncookies",
    "awscredentials",
    "credentialsfile",
];

fn normalized(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Findings on the parameter names of `def`'s input schema: field
/// `inputSchema.properties.<name>` (nested: `….properties.a.properties.b`), span
/// the whole name. These name a key, not a string, so [`strip_definition`] leaves
/// them alone.
pub(super) fn parameter_names(def: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(schema) = def.get("inputSchema") {
        walk(schema, "inputSchema".to_owned(), &mut out);
    }
    out
}

fn walk(schema: &Value, field: String, out: &mut Vec<Finding>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                let path = format!("{field}.{key}");
                if key == "properties"
                    && let Some(props) = value.as_object()
                {
                    for (name, sub) in props {
                        let at = format!("{path}.{name}");
                        judge_all(name, &at, out);
                        walk(sub, at, out);
                    }
                } else {
                    walk(value, path, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, format!("{field}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Parts of a parameter name that ask for the model's context
/// (`system_instructions_verbatim`, `full_chat_log`); a name ending in an id or a
/// count (`conversation_id`) names a thing of the service instead.
const CONTEXT_PARTS: &[&str] = &[
    "systemprompt",
    "systeminstructions",
    "chatlog",
    "chathistory",
    "conversationhistory",
    "conversationlog",
    "previousmessage",
    "lastusermessage",
    "toldtodo",
    "instructionsverbatim",
    "yourinstructions",
    "youwereasked",
    "wereyoutold",
];
const THING_ENDINGS: &[&str] = &[
    "id", "ids", "key", "name", "title", "type", "url", "uri", "count", "limit", "index",
];

/// Findings on one parameter name: the lists above, invisible characters, and the
/// phrase rules read on the name with `_` as spaces.
fn judge_all(name: &str, field: &str, out: &mut Vec<Finding>) {
    let mut hits = Vec::new();
    invisible_unicode(name, &mut hits);
    let folded = Folded::new(name);
    let spaced = folded.text.replace(['_', '-'], " ");
    let mut phrase_hits = Vec::new();
    phrases(&spaced, &mut phrase_hits);
    for mut h in phrase_hits {
        h.span = folded.original(h.span);
        hits.push(h);
    }
    out.extend(findings(field, name, hits));
    if let Some(f) = judge(name, field) {
        out.push(f);
    }
}

fn judge(name: &str, field: &str) -> Option<Finding> {
    let n = normalized(name);
    let part = CONTEXT_PARTS.iter().any(|p| n.contains(p))
        && !THING_ENDINGS.iter().any(|e| n.ends_with(e));
    let (rule, severity, message) = if CONTEXT_NAMES_WEAK.contains(&n.as_str()) {
        (
            CONTEXT,
            Severity::Low,
            "a parameter named for the model's prompt or identity",
        )
    } else if CONTEXT_NAMES.contains(&n.as_str()) || part {
        (
            CONTEXT,
            Severity::Medium,
            "a parameter that asks for the model's conversation or instructions",
        )
    } else if SECRET_NAMES.contains(&n.as_str()) {
        (
            SECRET,
            Severity::Medium,
            "a parameter that asks for a secret kept on the user's machine",
        )
    } else {
        return None;
    };
    Some(Finding {
        rule,
        severity,
        field: field.to_owned(),
        span: 0..name.len(),
        excerpt: excerpt(name),
        message: message.to_owned(),
    })
}
