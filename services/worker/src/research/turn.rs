//! One model turn of a slice: the job's budget reserved, the call, a trace step
//! and its cost settled. Research, agent and report slices and the model steps of
//! browse slices all take their turns here.

use std::time::Instant;

use trawl_core::ports::ToolError;
use trawl_model::{Block, Request, Response, ResultPart, Usage};
use trawl_tools::Recorder;

use crate::JobContext;
use crate::models::Resolved;

/// One model turn of a slice: budget reserved, the call, a trace step and its
/// cost. Shared by the research slices and the model steps of browse slices.
pub(crate) async fn model_turn(
    job: &JobContext,
    model: &Resolved,
    rec: &Recorder,
    req: &Request,
) -> Result<Response, ToolError> {
    use tracing::Instrument;
    let span = tracing::info_span!(
        "model_turn",
        otel.name = %format_args!("model {}", model.model),
        model = %model.model,
        input_tokens = tracing::field::Empty,
        output_tokens = tracing::field::Empty,
        stop_reason = tracing::field::Empty,
    );
    turn_in(job, model, rec, req, &span)
        .instrument(span.clone())
        .await
}

async fn turn_in(
    job: &JobContext,
    model: &Resolved,
    rec: &Recorder,
    req: &Request,
    span: &tracing::Span,
) -> Result<Response, ToolError> {
    let price = model.price.unwrap_or_default();
    let reserve = price.cost(&Usage {
        input_tokens: approx_tokens(req),
        output_tokens: u64::from(req.max_tokens),
        ..Usage::default()
    });
    let budget = &job.budget;
    budget.reserve(reserve, "a model turn").await?;
    let digest = trawl_core::digest(&[&model.model, &format!("{:?}", req.messages)]);
    let started = Instant::now();
    let result = model.client.complete(req).await;
    let latency = started.elapsed();
    match result {
        Ok(resp) => {
            let cost = price.cost(&resp.usage);
            budget.settle(reserve, cost).await;
            rec.model_turn(&model.model, &digest, Ok(()), latency, cost);
            let u = &resp.usage;
            trawl_telemetry::names::model_turn(
                &model.label,
                "ok",
                latency,
                [
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_creation_input_tokens,
                    u.cache_read_input_tokens,
                ],
            );
            span.record("input_tokens", resp.usage.input_tokens);
            span.record("output_tokens", resp.usage.output_tokens);
            span.record("stop_reason", format!("{:?}", resp.stop_reason));
            Ok(resp)
        }
        Err(e) => {
            budget.release(reserve).await;
            let code = format!("model_{}", e.code);
            trawl_telemetry::names::model_turn(&model.label, &code, latency, [0; 4]);
            let err = if e.transient {
                ToolError::transient(code, e.to_string())
            } else {
                ToolError::permanent(code, e.to_string())
            };
            rec.model_turn(
                &model.model,
                &digest,
                Err(&err),
                latency,
                trawl_core::cost::Micros::ZERO,
            );
            Err(err)
        }
    }
}

/// Rough input tokens of a request (4 bytes a token), to reserve budget before
/// the turn; the turn's usage settles it.
fn approx_tokens(req: &Request) -> u64 {
    let mut bytes = req.system.as_ref().map_or(0, String::len);
    for m in &req.messages {
        for b in &m.content {
            bytes += match b {
                Block::Text { text } => text.len(),
                Block::ToolUse { input, .. } => input.to_string().len(),
                Block::ToolResult { content, .. } => content
                    .iter()
                    .map(|p| match p {
                        ResultPart::Text(t) => t.len(),
                        ResultPart::ToolReference(n) => n.len(),
                    })
                    .sum(),
                Block::Other(v) => v.to_string().len(),
            };
        }
    }
    for t in &req.tools {
        bytes += t.description.len() + t.input_schema.to_string().len();
    }
    (bytes / 4) as u64 + 16
}
