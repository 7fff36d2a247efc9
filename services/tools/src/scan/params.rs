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
    "llmmodel",
    "modelversion",
    "whichmodel",
    "yourmodel",
    "assistantmodel",
    "modelprovider",
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
    let purpose = Purpose::of(def);
    if let Some(schema) = def.get("inputSchema") {
        walk(schema, "inputSchema".to_owned(), &purpose, &mut out);
    }
    out
}

/// Kinds of data a parameter may ask for that only some tools have a use for:
/// the parameter names (lower case, separators removed) of each, and the words
/// of a tool's name, title or description that make them its business.
struct Sensitive {
    what: &'static str,
    /// `secret-request` or `context-request`.
    rule: &'static str,
    names: &'static [&'static str],
    purpose: &'static str,
}

const SENSITIVE: &[Sensitive] = &[
    Sensitive {
        what: "a password or one-time code",
        rule: SECRET,
        names: &[
            "password",
            "passwd",
            "passcode",
            "passphrase",
            "pin",
            "pincode",
            "otp",
            "otpcode",
            "mfacode",
            "2facode",
            "twofactorcode",
            "verificationcode",
            "securityanswer",
            "userpassword",
            "accountpassword",
            "loginpassword",
        ],
        purpose: r"(?i)pass(?:word|code|phrase)|log\s?in|sign\s?(?:in|on)|auth|credential|account|encrypt|decrypt|protect|unlock|verif|2fa|mfa|otp|one[\s-]time|vault|zip|archive|pdf|document|wifi|database|connect",
    },
    Sensitive {
        what: "a card or bank account",
        rule: SECRET,
        names: &[
            "creditcard",
            "creditcardnumber",
            "cardnumber",
            "cardno",
            "cvv",
            "cvc",
            "cvv2",
            "cardcvv",
            "securitycode",
            "cardexpiry",
            "expirydate",
            "bankaccount",
            "bankaccountnumber",
            "iban",
            "routingnumber",
            "sortcode",
            "swiftcode",
        ],
        purpose: r"(?i)pay|card|bill|checkout|purchas|order|buy|bank|transfer|invoice|charg|refund|wallet|subscri|donat|financ|merchant|transaction|iban|swift",
    },
    Sensitive {
        what: "an identity document or number",
        rule: SECRET,
        names: &[
            "ssn",
            "socialsecuritynumber",
            "socialsecurity",
            "passport",
            "passportnumber",
            "passportno",
            "driverslicense",
            "driverslicensenumber",
            "driverlicense",
            "nationalid",
            "nationalidnumber",
            "taxid",
            "taxnumber",
            "mothersmaidenname",
            "dateofbirth",
            "birthdate",
        ],
        purpose: r"(?i)identit|identif|kyc|verif|passport|visa|travel|flight|booking|tax|employ|hr\b|payroll|patient|medical|health|insur|onboard|background|licen[cs]|citizen|immigra|age\b|birth|person|profile|customer|member|regist",
    },
    Sensitive {
        what: "an API key or access token",
        rule: SECRET,
        names: &[
            "apikey",
            "apisecret",
            "secretkey",
            "privatekey",
            "accesstoken",
            "refreshtoken",
            "sessiontoken",
            "authtoken",
            "bearertoken",
            "oauthtoken",
            "accesskey",
            "secretaccesskey",
            "clientsecret",
            "credentials",
            "sessioncookie",
            "cookie",
            "cookies",
            "githubtoken",
            "openaiapikey",
            "awssecretaccesskey",
        ],
        purpose: r"(?i)api|key|token|auth|credential|secret|login|sign\s?in|account|connect|integrat|session|cookie|oauth|webhook|deploy|cloud|aws|git|repo|config|setup|client|bot|access|servic|hosted|provider|platform|\bmodels?\b|llm",
    },
    Sensitive {
        what: "the model's name or instructions",
        rule: CONTEXT,
        names: CONTEXT_NAMES_WEAK,
        purpose: r"(?i)\bmodels?\b|llm|prompt|\bai\b|gpt|claude|gemini|chat|complet|generat|agent|assistant|inference|embedding|openai|anthropic|ollama|persona",
    },
];

/// What a tool says it is for: its name (separators as spaces), title and
/// description, for telling a parameter it needs from one it does not.
struct Purpose {
    text: String,
}

impl Purpose {
    fn of(def: &Value) -> Purpose {
        let get = |k: &str| def.get(k).and_then(Value::as_str).unwrap_or("");
        let title = def
            .pointer("/annotations/title")
            .and_then(Value::as_str)
            .unwrap_or("");
        let text = format!(
            "{} {} {} {}",
            get("name").replace(['_', '-', '.'], " "),
            get("title"),
            title,
            get("description")
        );
        Purpose { text }
    }

    /// The kind of sensitive data `normalized` names, when the tool's purpose
    /// does not speak of it.
    fn out_of_scope(&self, normalized: &str) -> Option<&'static Sensitive> {
        let (i, kind) = SENSITIVE
            .iter()
            .enumerate()
            .find(|(_, k)| k.names.contains(&normalized))?;
        static PURPOSES: LazyLock<Vec<Regex>> = LazyLock::new(|| {
            SENSITIVE
                .iter()
                .map(|k| {
                    Regex::new(k.purpose).unwrap_or_else(|e| {
                        panic!("scan: purpose pattern of {} does not compile: {e}", k.what)
                    })
                })
                .collect()
        });
        (!PURPOSES[i].is_match(&self.text)).then_some(kind)
    }
}

fn walk(schema: &Value, field: String, purpose: &Purpose, out: &mut Vec<Finding>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                let path = format!("{field}.{key}");
                if key == "properties"
                    && let Some(props) = value.as_object()
                {
                    for (name, sub) in props {
                        let at = format!("{path}.{name}");
                        judge_all(name, &at, purpose, out);
                        walk(sub, at, purpose, out);
                    }
                } else {
                    walk(value, path, purpose, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, format!("{field}[{i}]"), purpose, out);
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
fn judge_all(name: &str, field: &str, purpose: &Purpose, out: &mut Vec<Finding>) {
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
    if let Some(f) = judge(name, field, purpose) {
        out.push(f);
    }
}

fn judge(name: &str, field: &str, purpose: &Purpose) -> Option<Finding> {
    let n = normalized(name);
    if let Some(kind) = purpose.out_of_scope(&n) {
        return Some(Finding {
            rule: kind.rule,
            severity: Severity::Medium,
            field: field.to_owned(),
            span: 0..name.len(),
            excerpt: excerpt(name),
            message: format!(
                "a parameter that asks for {}, which nothing in the tool's name or description calls for",
                kind.what
            ),
        });
    }
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
