//! What an upstream server sends back during one of its tool calls (sampling and
//! elicitation requests, progress and log notifications), carried to the client
//! that made the call.
//!
//! The caller (the `/mcp` gateway) runs [`ToolLayer::call`](crate::ToolLayer::call)
//! inside [`FORWARD`]`.scope(sender, …)` and answers what arrives on the receiver
//! from its own task, so that rmcp sends the requests on that call's own stream.
//! The upstream's client handler ([`UpstreamHandler`]) finds the call an
//! incoming request belongs to by the request id it came with (Streamable HTTP
//! tags it), by the progress token for progress, and otherwise, when exactly one
//! call of that upstream is in flight, by that (stdio has no such tag). A
//! request that belongs to no forwarding call is refused, as trawl has no user of
//! its own to ask.

// Sampling and logging are deprecated by MCP 2026-07-28 (SEP-2577) but are part
// of 2025-11-25, which upstreams and clients still speak.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationCapability, Implementation,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    RequestId, SamplingCapability,
};
use rmcp::service::{InboundStreamOrigin, NotificationContext, RequestContext};
use rmcp::{ClientHandler, ErrorData, RoleClient};
use tokio::sync::{mpsc, oneshot};

/// One thing an upstream sent during a call.
#[derive(Debug)]
pub enum Forwarded {
    /// `sampling/createMessage`: answer on `reply`.
    Sampling {
        params: CreateMessageRequestParams,
        reply: oneshot::Sender<Result<CreateMessageResult, ErrorData>>,
    },
    /// `elicitation/create`: answer on `reply`.
    Elicitation {
        params: ElicitRequestParams,
        reply: oneshot::Sender<Result<ElicitResult, ErrorData>>,
    },
    /// `notifications/progress` (the caller puts its own client's token in).
    Progress(ProgressNotificationParam),
    /// `notifications/message`.
    Log(LoggingMessageNotificationParam),
}

/// Where a call's forwarded messages go.
pub type Forwarder = mpsc::Sender<Forwarded>;

tokio::task_local! {
    /// Set by a caller that can answer what an upstream asks during its calls.
    pub static FORWARD: Forwarder;
}

/// The forwarder of the current task, if its caller set one.
pub(crate) fn current() -> Option<Forwarder> {
    FORWARD.try_with(Clone::clone).ok()
}

/// The calls of one upstream that forward, by request id and progress token.
#[derive(Clone, Default)]
pub(crate) struct Routes {
    inner: Arc<Mutex<HashMap<RequestId, (ProgressToken, Forwarder)>>>,
}

impl Routes {
    pub(crate) fn add(&self, id: RequestId, token: ProgressToken, to: Forwarder) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (token, to));
    }

    pub(crate) fn remove(&self, id: &RequestId) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// The call a message belongs to: by the request it came on, else the only
    /// call in flight.
    fn by_origin(&self, origin: Option<&InboundStreamOrigin>) -> Option<Forwarder> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(InboundStreamOrigin::OutboundRequest(id)) = origin
            && let Some((_, to)) = g.get(id)
        {
            return Some(to.clone());
        }
        if g.len() == 1 {
            return g.values().next().map(|(_, to)| to.clone());
        }
        None
    }

    fn by_token(&self, token: &ProgressToken) -> Option<Forwarder> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.values()
            .find(|(t, _)| t == token)
            .map(|(_, to)| to.clone())
    }
}

/// trawl's client side towards an upstream: it declares sampling and
/// elicitation, and forwards them to the client of the call in flight.
#[derive(Clone)]
pub(crate) struct UpstreamHandler {
    pub(crate) routes: Routes,
}

fn no_route(what: &str) -> ErrorData {
    ErrorData::invalid_request(
        format!(
            "{what}: no client to ask (this call did not come from an MCP client that can answer)"
        ),
        None,
    )
}

impl ClientHandler for UpstreamHandler {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        #[allow(deprecated)]
        {
            caps.sampling = Some(SamplingCapability::default());
        }
        caps.elicitation = Some(ElicitationCapability::default());
        ClientConfig::new(
            caps,
            Implementation::new("trawl", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let to = self
            .routes
            .by_origin(context.extensions.get::<InboundStreamOrigin>())
            .ok_or_else(|| no_route("sampling/createMessage"))?;
        let (reply, answer) = oneshot::channel();
        to.send(Forwarded::Sampling { params, reply })
            .await
            .map_err(|_| no_route("sampling/createMessage"))?;
        answer
            .await
            .map_err(|_| no_route("sampling/createMessage"))?
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let to = self
            .routes
            .by_origin(context.extensions.get::<InboundStreamOrigin>())
            .ok_or_else(|| no_route("elicitation/create"))?;
        let (reply, answer) = oneshot::channel();
        to.send(Forwarded::Elicitation { params, reply })
            .await
            .map_err(|_| no_route("elicitation/create"))?;
        answer.await.map_err(|_| no_route("elicitation/create"))?
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(to) = self.routes.by_token(&params.progress_token) {
            let _ = to.send(Forwarded::Progress(params)).await;
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        if let Some(to) = self
            .routes
            .by_origin(context.extensions.get::<InboundStreamOrigin>())
        {
            let _ = to.send(Forwarded::Log(params)).await;
        }
    }
}
