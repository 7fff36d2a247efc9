//! The wire contracts of what travels on NATS: protobuf messages compiled from
//! `proto/trawl/v1/*.proto`, and their conversions to and from the core types.
//!
//! Roles never see these types: the NATS adapters in `trawl-queue` call
//! [`encode_slice`] / [`decode_slice`] and [`encode_event`] / [`decode_event`] at the
//! edge, so everything inside works with [`trawl_core`] types only.
//!
//! Every envelope carries a `schema_version`; this build writes and reads
//! [`SCHEMA_VERSION`]. Decoding checks it before reading anything else, then checks
//! every required field and parses ids and country codes with the core's own
//! parsers. Whatever fails is a [`PortError::Corrupt`] naming the message and the
//! field, so a consumer can terminate the message and log why.
//!
//! # Layout
//!
//! - [`pb`]: the prost types, generated at build time by `build.rs` (protox compiles
//!   the `.proto` files; no system `protoc` is needed).
//! - this file: the version constant, the four encode/decode functions, and the
//!   `From` / `TryFrom` conversions they are made of.

use std::fmt::Display;

use prost::Message as _;
use trawl_core::cost::Micros;
use trawl_core::geo::Geo;
use trawl_core::model::{Engine, JobId, SliceId, SliceKind, SliceSpec};
use trawl_core::ports::{Event, PortError, SliceFinished, SliceMessage};

/// The protobuf types of package `trawl.v1`, as prost generates them.
#[allow(missing_docs, clippy::all, clippy::pedantic, clippy::nursery)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/trawl.v1.rs"));
}

/// The schema version this build writes, and the only one it reads.
pub const SCHEMA_VERSION: u32 = 1;

/// A slice message as protobuf bytes.
pub fn encode_slice(msg: &SliceMessage) -> Vec<u8> {
    pb::SliceMessage::from(msg).encode_to_vec()
}

/// Reads a slice message; `Corrupt` if the bytes are not a `trawl.v1.SliceMessage`
/// of this schema version with every required field.
pub fn decode_slice(bytes: &[u8]) -> Result<SliceMessage, PortError> {
    let msg = pb::SliceMessage::decode(bytes).map_err(|e| corrupt("slice message", e))?;
    SliceMessage::try_from(msg)
}

/// An event as protobuf bytes.
pub fn encode_event(ev: &Event) -> Vec<u8> {
    pb::Event::from(ev).encode_to_vec()
}

/// Reads an event; `Corrupt` if the bytes are not a `trawl.v1.Event` of this schema
/// version with every required field.
pub fn decode_event(bytes: &[u8]) -> Result<Event, PortError> {
    let ev = pb::Event::decode(bytes).map_err(|e| corrupt("event", e))?;
    Event::try_from(ev)
}

// ---------------------------------------------------------------------------
// Slices

impl From<&SliceMessage> for pb::SliceMessage {
    fn from(msg: &SliceMessage) -> Self {
        pb::SliceMessage {
            schema_version: SCHEMA_VERSION,
            job_id: msg.job_id.to_string(),
            slice: Some(pb::SliceSpec::from(&msg.slice)),
        }
    }
}

impl From<&SliceSpec> for pb::SliceSpec {
    fn from(spec: &SliceSpec) -> Self {
        let kind = match &spec.kind {
            SliceKind::Search {
                query,
                geo,
                engine,
                follow_top,
            } => pb::slice_spec::Kind::Search(pb::SearchSlice {
                query: query.clone(),
                geo: geo.to_string(),
                engine: pb::Engine::from(*engine).into(),
                follow_top: *follow_top,
            }),
            SliceKind::Page { url, geo } => pb::slice_spec::Kind::Page(pb::PageSlice {
                url: url.clone(),
                geo: geo.to_string(),
            }),
            SliceKind::Research { question, geo } => {
                pb::slice_spec::Kind::Research(pb::ResearchSlice {
                    question: question.clone(),
                    geo: geo.to_string(),
                })
            }
            SliceKind::Agent {
                question,
                index,
                geo,
            } => pb::slice_spec::Kind::Agent(pb::AgentSlice {
                question: question.clone(),
                index: *index,
                geo: geo.to_string(),
            }),
            SliceKind::Report { question, geo } => pb::slice_spec::Kind::Report(pb::ReportSlice {
                question: question.clone(),
                geo: geo.to_string(),
            }),
            SliceKind::Browse { url, geo } => pb::slice_spec::Kind::Browse(pb::BrowseSlice {
                url: url.clone(),
                geo: geo.to_string(),
            }),
        };
        pb::SliceSpec {
            id: spec.id.to_string(),
            parent: spec.parent.as_ref().map(ToString::to_string),
            kind: Some(kind),
        }
    }
}

impl From<Engine> for pb::Engine {
    fn from(engine: Engine) -> Self {
        match engine {
            Engine::Google => pb::Engine::Google,
            Engine::Bing => pb::Engine::Bing,
        }
    }
}

impl TryFrom<pb::SliceMessage> for SliceMessage {
    type Error = PortError;

    fn try_from(msg: pb::SliceMessage) -> Result<Self, PortError> {
        const WHAT: &str = "slice message";
        check_version(WHAT, msg.schema_version)?;
        let job_id = job_id(WHAT, "job_id", &msg.job_id)?;
        let spec = msg.slice.ok_or_else(|| missing(WHAT, "slice"))?;
        let kind = match spec.kind.ok_or_else(|| missing(WHAT, "slice.kind"))? {
            pb::slice_spec::Kind::Search(s) => SliceKind::Search {
                query: s.query,
                geo: geo(WHAT, "slice.search.geo", &s.geo)?,
                engine: match pb::Engine::try_from(s.engine) {
                    Ok(pb::Engine::Google) => Engine::Google,
                    Ok(pb::Engine::Bing) => Engine::Bing,
                    Ok(pb::Engine::Unspecified) => {
                        return Err(missing(WHAT, "slice.search.engine"));
                    }
                    Err(_) => {
                        return Err(corrupt(
                            WHAT,
                            format_args!("slice.search.engine: unknown engine {}", s.engine),
                        ));
                    }
                },
                follow_top: s.follow_top,
            },
            pb::slice_spec::Kind::Page(p) => SliceKind::Page {
                url: p.url,
                geo: geo(WHAT, "slice.page.geo", &p.geo)?,
            },
            pb::slice_spec::Kind::Research(r) => SliceKind::Research {
                question: r.question,
                geo: geo(WHAT, "slice.research.geo", &r.geo)?,
            },
            pb::slice_spec::Kind::Agent(a) => SliceKind::Agent {
                question: a.question,
                index: a.index,
                geo: geo(WHAT, "slice.agent.geo", &a.geo)?,
            },
            pb::slice_spec::Kind::Report(r) => SliceKind::Report {
                question: r.question,
                geo: geo(WHAT, "slice.report.geo", &r.geo)?,
            },
            pb::slice_spec::Kind::Browse(b) => SliceKind::Browse {
                url: b.url,
                geo: geo(WHAT, "slice.browse.geo", &b.geo)?,
            },
        };
        let parent = match spec.parent {
            Some(p) => Some(slice_id(WHAT, "slice.parent", p)?),
            None => None,
        };
        Ok(SliceMessage {
            job_id,
            slice: SliceSpec {
                id: slice_id(WHAT, "slice.id", spec.id)?,
                parent,
                kind,
            },
        })
    }
}

// ---------------------------------------------------------------------------
// Events

impl From<&Event> for pb::Event {
    fn from(ev: &Event) -> Self {
        use pb::event::Kind;
        let kind = match ev {
            Event::JobCreated { job_id } => Kind::JobCreated(pb::JobCreated {
                job_id: job_id.to_string(),
            }),
            Event::SliceFinished(f) => Kind::SliceFinished(pb::SliceFinished {
                job_id: f.job_id.to_string(),
                slice_id: f.slice_id.to_string(),
                succeeded: f.succeeded,
                children: f.children,
                items_valid: f.items_valid,
                items_rejected: f.items_rejected,
                upstream_calls: f.upstream_calls,
                cache_hits: f.cache_hits,
                cost_micros: f.cost.0,
            }),
            Event::ApprovalDecided { job_id, approved } => {
                Kind::ApprovalDecided(pb::ApprovalDecided {
                    job_id: job_id.to_string(),
                    approved: *approved,
                })
            }
            Event::JobCancelled { job_id } => Kind::JobCancelled(pb::JobCancelled {
                job_id: job_id.to_string(),
            }),
        };
        pb::Event {
            schema_version: SCHEMA_VERSION,
            kind: Some(kind),
        }
    }
}

impl TryFrom<pb::Event> for Event {
    type Error = PortError;

    fn try_from(ev: pb::Event) -> Result<Self, PortError> {
        use pb::event::Kind;
        const WHAT: &str = "event";
        check_version(WHAT, ev.schema_version)?;
        Ok(match ev.kind.ok_or_else(|| missing(WHAT, "kind"))? {
            Kind::JobCreated(e) => Event::JobCreated {
                job_id: job_id(WHAT, "job_created.job_id", &e.job_id)?,
            },
            Kind::SliceFinished(f) => Event::SliceFinished(SliceFinished {
                job_id: job_id(WHAT, "slice_finished.job_id", &f.job_id)?,
                slice_id: slice_id(WHAT, "slice_finished.slice_id", f.slice_id)?,
                succeeded: f.succeeded,
                children: f.children,
                items_valid: f.items_valid,
                items_rejected: f.items_rejected,
                upstream_calls: f.upstream_calls,
                cache_hits: f.cache_hits,
                cost: Micros(f.cost_micros),
            }),
            Kind::ApprovalDecided(a) => Event::ApprovalDecided {
                job_id: job_id(WHAT, "approval_decided.job_id", &a.job_id)?,
                approved: a.approved,
            },
            Kind::JobCancelled(c) => Event::JobCancelled {
                job_id: job_id(WHAT, "job_cancelled.job_id", &c.job_id)?,
            },
        })
    }
}

// ---------------------------------------------------------------------------
// Checks

fn corrupt(what: &str, detail: impl Display) -> PortError {
    PortError::Corrupt(format!("{what}: {detail}"))
}

fn missing(what: &str, field: &str) -> PortError {
    corrupt(what, format_args!("missing required field {field}"))
}

fn check_version(what: &str, version: u32) -> Result<(), PortError> {
    match version {
        SCHEMA_VERSION => Ok(()),
        0 => Err(missing(what, "schema_version")),
        v => Err(corrupt(
            what,
            format_args!("schema version {v} is not supported (this build reads {SCHEMA_VERSION})"),
        )),
    }
}

fn job_id(what: &str, field: &str, s: &str) -> Result<JobId, PortError> {
    JobId::parse(s).map_err(|e| corrupt(what, format_args!("{field}: {e}")))
}

fn geo(what: &str, field: &str, s: &str) -> Result<Geo, PortError> {
    Geo::parse(s).map_err(|e| corrupt(what, format_args!("{field}: {e}")))
}

fn slice_id(what: &str, field: &str, s: String) -> Result<SliceId, PortError> {
    if s.is_empty() {
        return Err(missing(what, field));
    }
    Ok(SliceId::from_stored(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobId {
        JobId::generate(1_700_000_000_000, 0x0123_4567_89ab_cdef)
    }

    fn us() -> Geo {
        Geo::parse("us").unwrap()
    }

    fn search(parent: Option<SliceId>) -> SliceMessage {
        SliceMessage {
            job_id: job(),
            slice: SliceSpec::new(
                SliceKind::Search {
                    query: "14 inch laptop".into(),
                    geo: us(),
                    engine: Engine::Bing,
                    follow_top: 3,
                },
                parent,
            ),
        }
    }

    fn page() -> SliceMessage {
        let parent = search(None).slice.id;
        SliceMessage {
            job_id: job(),
            slice: SliceSpec::new(
                SliceKind::Page {
                    url: "https://shop.example/p/1".into(),
                    geo: Geo::parse("jp").unwrap(),
                },
                Some(parent),
            ),
        }
    }

    fn events() -> Vec<Event> {
        vec![
            Event::JobCreated { job_id: job() },
            Event::SliceFinished(SliceFinished {
                job_id: job(),
                slice_id: search(None).slice.id,
                succeeded: true,
                children: 3,
                items_valid: 10,
                items_rejected: 2,
                upstream_calls: 4,
                cache_hits: 1,
                cost: Micros(1_500),
            }),
            Event::SliceFinished(SliceFinished {
                job_id: job(),
                slice_id: page().slice.id,
                succeeded: false,
                children: 0,
                items_valid: 0,
                items_rejected: 0,
                upstream_calls: 0,
                cache_hits: 0,
                // Refunds can make a cost negative; the wire carries the sign.
                cost: Micros(-7),
            }),
            Event::ApprovalDecided {
                job_id: job(),
                approved: true,
            },
            Event::ApprovalDecided {
                job_id: job(),
                approved: false,
            },
            Event::JobCancelled { job_id: job() },
        ]
    }

    fn corrupt_message(r: Result<impl std::fmt::Debug, PortError>) -> String {
        match r {
            Err(PortError::Corrupt(m)) => m,
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn every_slice_kind_round_trips() {
        let research = |kind| SliceMessage {
            job_id: job(),
            slice: SliceSpec::new(kind, Some(search(None).slice.id)),
        };
        for msg in [
            search(None),
            search(Some(page().slice.id)),
            page(),
            research(SliceKind::Research {
                question: "which EU retailers sell the X1 Carbon?".into(),
                geo: us(),
            }),
            research(SliceKind::Agent {
                question: "return policies of the X1 Carbon's sellers".into(),
                index: 3,
                geo: Geo::parse("de").unwrap(),
            }),
            research(SliceKind::Report {
                question: "q".into(),
                geo: us(),
            }),
            research(SliceKind::Browse {
                url: "https://portal.example/login".into(),
                geo: Geo::parse("de").unwrap(),
            }),
        ] {
            let bytes = encode_slice(&msg);
            assert_eq!(decode_slice(&bytes).unwrap(), msg);
        }
    }

    #[test]
    fn both_engines_round_trip() {
        for engine in [Engine::Google, Engine::Bing] {
            let mut msg = search(None);
            msg.slice.kind = SliceKind::Search {
                query: "q".into(),
                geo: us(),
                engine,
                follow_top: 0,
            };
            assert_eq!(decode_slice(&encode_slice(&msg)).unwrap(), msg);
        }
    }

    #[test]
    fn every_event_round_trips() {
        for ev in events() {
            let bytes = encode_event(&ev);
            assert_eq!(decode_event(&bytes).unwrap(), ev, "{ev:?}");
        }
    }

    /// Field numbers and types are the contract: these fail if one changes.
    #[test]
    fn the_wire_format_is_stable() {
        let job = JobId::generate(1, 2); // job_0000000000010000000000000002
        let job_hex = hex::encode(job.as_str());
        let slice = SliceMessage {
            job_id: job.clone(),
            slice: SliceSpec {
                id: SliceId::from_stored("s_1".into()),
                parent: Some(SliceId::from_stored("s_0".into())),
                kind: SliceKind::Page {
                    url: "https://x.example/".into(),
                    geo: Geo::parse("jp").unwrap(),
                },
            },
        };
        let expected = [
            "0801",                                     // 1: schema_version = 1
            &format!("1220{job_hex}"),                  // 2: job_id
            "1a24",                                     // 3: slice, 36 bytes
            "0a03735f31",                               //   1: id = s_1
            "1203735f30",                               //   2: parent = s_0
            "2218",                                     //   4: page, 24 bytes
            "0a1268747470733a2f2f782e6578616d706c652f", // 1: url
            "12026a70",                                 //     2: geo = jp
        ]
        .concat();
        assert_eq!(hex::encode(encode_slice(&slice)), expected);

        let ev = Event::SliceFinished(SliceFinished {
            job_id: job,
            slice_id: SliceId::from_stored("s_1".into()),
            succeeded: true,
            children: 2,
            items_valid: 3,
            items_rejected: 4,
            upstream_calls: 5,
            cache_hits: 6,
            cost: Micros(1_500),
        });
        let expected = [
            "0801",                    // 1: schema_version = 1
            "1a36",                    // 3: slice_finished, 54 bytes
            &format!("0a20{job_hex}"), //   1: job_id
            "1203735f31",              //   2: slice_id = s_1
            "1801",                    //   3: succeeded
            "2002",                    //   4: children
            "2803",                    //   5: items_valid
            "3004",                    //   6: items_rejected
            "3805",                    //   7: upstream_calls
            "4006",                    //   8: cache_hits
            "48dc0b",                  //   9: cost_micros = 1500
        ]
        .concat();
        assert_eq!(hex::encode(encode_event(&ev)), expected);
    }

    #[test]
    fn another_schema_version_is_refused() {
        let mut msg = pb::SliceMessage::from(&search(None));
        msg.schema_version = 2;
        let err = corrupt_message(decode_slice(&msg.encode_to_vec()));
        assert!(err.contains("schema version 2 is not supported"), "{err}");

        let mut ev = pb::Event::from(&events()[0]);
        ev.schema_version = 2;
        let err = corrupt_message(decode_event(&ev.encode_to_vec()));
        assert!(err.contains("schema version 2 is not supported"), "{err}");
    }

    #[test]
    fn a_missing_schema_version_is_refused() {
        let mut msg = pb::SliceMessage::from(&search(None));
        msg.schema_version = 0;
        let err = corrupt_message(decode_slice(&msg.encode_to_vec()));
        assert!(
            err.contains("missing required field schema_version"),
            "{err}"
        );
    }

    #[test]
    fn missing_required_fields_are_named() {
        let mut msg = pb::SliceMessage::from(&search(None));
        msg.slice = None;
        let err = corrupt_message(decode_slice(&msg.encode_to_vec()));
        assert!(err.contains("missing required field slice"), "{err}");

        let mut msg = pb::SliceMessage::from(&search(None));
        if let Some(s) = msg.slice.as_mut() {
            s.kind = None;
        }
        let err = corrupt_message(decode_slice(&msg.encode_to_vec()));
        assert!(err.contains("missing required field slice.kind"), "{err}");

        let mut msg = pb::SliceMessage::from(&search(None));
        if let Some(s) = msg.slice.as_mut() {
            s.id.clear();
        }
        let err = corrupt_message(decode_slice(&msg.encode_to_vec()));
        assert!(err.contains("slice.id"), "{err}");

        let mut msg = pb::SliceMessage::from(&search(None));
        msg.job_id.clear();
        let err = corrupt_message(decode_slice(&msg.encode_to_vec()));
        assert!(err.contains("job_id"), "{err}");

        let ev = pb::Event {
            schema_version: SCHEMA_VERSION,
            kind: None,
        };
        let err = corrupt_message(decode_event(&ev.encode_to_vec()));
        assert!(err.contains("missing required field kind"), "{err}");
    }

    #[test]
    fn bad_values_are_refused_with_the_field_name() {
        let mut msg = pb::SliceMessage::from(&search(None));
        if let Some(pb::slice_spec::Kind::Search(s)) =
            msg.slice.as_mut().and_then(|s| s.kind.as_mut())
        {
            s.geo = "XX".into();
        }
        let err = corrupt_message(decode_slice(&msg.encode_to_vec()));
        assert!(err.contains("slice.search.geo"), "{err}");

        for (engine, needle) in [
            (0, "missing required field slice.search.engine"),
            (9, "unknown engine 9"),
        ] {
            let mut msg = pb::SliceMessage::from(&search(None));
            if let Some(pb::slice_spec::Kind::Search(s)) =
                msg.slice.as_mut().and_then(|s| s.kind.as_mut())
            {
                s.engine = engine;
            }
            let err = corrupt_message(decode_slice(&msg.encode_to_vec()));
            assert!(err.contains(needle), "{err}");
        }

        let ev = pb::Event {
            schema_version: SCHEMA_VERSION,
            kind: Some(pb::event::Kind::JobCancelled(pb::JobCancelled {
                job_id: "../../etc/passwd".into(),
            })),
        };
        let err = corrupt_message(decode_event(&ev.encode_to_vec()));
        assert!(err.contains("job_cancelled.job_id"), "{err}");
    }

    #[test]
    fn garbage_is_corrupt_not_a_panic() {
        for bytes in [&b"\xff\xff\xff"[..], b"not protobuf at all", b""] {
            assert!(matches!(decode_slice(bytes), Err(PortError::Corrupt(_))));
            assert!(matches!(decode_event(bytes), Err(PortError::Corrupt(_))));
        }
    }
}
