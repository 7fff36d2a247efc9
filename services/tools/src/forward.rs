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
//!
//! Progress and log notifications are routed the same way, but by [`Routed`],
//! the upstream's transport, as they are read: rmcp runs notification handlers
//! on tasks of their own, which may run after the call's answer has come back
//! and the call has stopped listening. Routed as they are read, they are in the
//! call's channel before its answer is, and the caller passes them on first.

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
use rmcp::model::{JsonRpcMessage, JsonRpcNotification, ServerNotification};
use rmcp::service::{InboundStreamOrigin, RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
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
///
/// A call's route is entered *before* its request is sent (the upstream may
/// ask for input, or log, as soon as it reads the request: before the sender
/// learns the request's id) and bound to the id and token once they are
/// known. Until then it is found as the only call in flight.
#[derive(Clone, Default)]
pub(crate) struct Routes {
    inner: Arc<Mutex<RouteTable>>,
}

#[derive(Default)]
struct RouteTable {
    next: u64,
    /// Slot → the call's request id and progress token (once sent), forwarder.
    calls: HashMap<u64, (Option<(RequestId, ProgressToken)>, Forwarder)>,
}

/// A call's route, removed when dropped: a call that ends in any way (its
/// answer, a timeout, its future dropped) leaves no route behind to take other
/// calls' messages or to make "the only call in flight" ambiguous.
pub(crate) struct Route {
    routes: Routes,
    slot: u64,
}

impl Route {
    /// The request id and progress token the call was sent with.
    pub(crate) fn bind(&self, id: RequestId, token: ProgressToken) {
        if let Some(call) = self.routes.table().calls.get_mut(&self.slot) {
            call.0 = Some((id, token));
        }
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        self.routes.table().calls.remove(&self.slot);
    }
}

impl Routes {
    fn table(&self) -> std::sync::MutexGuard<'_, RouteTable> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Routes what the upstream sends for the call about to be sent to `to`,
    /// for as long as the returned [`Route`] lives; [`Route::bind`] it to the
    /// request once sent.
    pub(crate) fn enter(&self, to: Forwarder) -> Route {
        let mut table = self.table();
        table.next += 1;
        let slot = table.next;
        table.calls.insert(slot, (None, to));
        Route {
            routes: self.clone(),
            slot,
        }
    }

    /// How many calls are routed now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table().calls.len()
    }

    /// The call a message belongs to: by the request it came on, else the only
    /// call in flight.
    fn by_origin(&self, origin: Option<&InboundStreamOrigin>) -> Option<Forwarder> {
        let id = match origin {
            Some(InboundStreamOrigin::OutboundRequest(id)) => Some(id),
            _ => None,
        };
        self.find(|(i, _)| Some(i) == id)
    }

    /// The call a progress token belongs to, else the only call in flight.
    fn by_token(&self, token: &ProgressToken) -> Option<Forwarder> {
        self.find(|(_, t)| t == token)
    }

    /// The bound call that `is` picks, else the only call in flight (bound or
    /// not yet), else none.
    fn find(&self, is: impl Fn(&(RequestId, ProgressToken)) -> bool) -> Option<Forwarder> {
        let table = self.table();
        let picked = table
            .calls
            .values()
            .find(|(bound, _)| bound.as_ref().is_some_and(&is));
        match picked {
            Some((_, to)) => Some(to.clone()),
            None if table.calls.len() == 1 => table.calls.values().next().map(|(_, to)| to.clone()),
            None => None,
        }
    }

    /// The forwarding call a progress or log notification belongs to, with
    /// what to send it; `None` (and the message untouched) for anything else.
    fn claim(
        &self,
        msg: &mut Option<RxJsonRpcMessage<RoleClient>>,
    ) -> Option<(Forwarder, Forwarded)> {
        let Some(JsonRpcMessage::Notification(JsonRpcNotification { notification, .. })) = msg
        else {
            return None;
        };
        let to = match notification {
            ServerNotification::ProgressNotification(n) => self.by_token(&n.params.progress_token),
            ServerNotification::LoggingMessageNotification(n) => {
                self.by_origin(n.extensions.get::<InboundStreamOrigin>())
            }
            _ => None,
        }?;
        match msg.take() {
            Some(JsonRpcMessage::Notification(JsonRpcNotification {
                notification: ServerNotification::ProgressNotification(n),
                ..
            })) => Some((to, Forwarded::Progress(n.params))),
            Some(JsonRpcMessage::Notification(JsonRpcNotification {
                notification: ServerNotification::LoggingMessageNotification(n),
                ..
            })) => Some((to, Forwarded::Log(n.params))),
            _ => unreachable!("matched as a progress or log notification above"),
        }
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
}

/// An upstream's transport that hands progress and log notifications to the
/// call they belong to as it reads them (see the module doc). What belongs to
/// no forwarding call goes on to rmcp.
pub(crate) struct Routed<T> {
    pub(crate) inner: T,
    pub(crate) routes: Routes,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Routed<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let mut msg = Some(self.inner.receive().await?);
            match self.routes.claim(&mut msg) {
                // A call that stopped listening (it timed out) misses it.
                Some((to, forwarded)) => {
                    let _ = to.send(forwarded).await;
                }
                None => return msg,
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A route goes with its call, however the call ends: a call cut short by a
    /// timeout (its future dropped mid-wait) leaves no route behind.
    #[tokio::test]
    async fn a_route_is_released_when_its_call_ends_in_any_way() {
        let routes = Routes::default();
        let (to, _rx) = mpsc::channel(1);
        {
            // Found before it is bound (the upstream may ask first), then by id.
            let route = routes.enter(to.clone());
            assert_eq!(routes.len(), 1);
            assert!(routes.by_origin(None).is_some(), "the only call in flight");
            let id = RequestId::Number(1);
            route.bind(id.clone(), ProgressToken(id.clone()));
            let other = routes.enter(to.clone());
            assert!(routes.by_origin(None).is_none(), "two calls: not guessed");
            let origin = InboundStreamOrigin::OutboundRequest(id.clone());
            assert!(routes.by_origin(Some(&origin)).is_some());
            assert!(routes.by_token(&ProgressToken(id)).is_some());
            drop(other);
        }
        assert_eq!(routes.len(), 0);

        let call = {
            let routes = routes.clone();
            let to = to.clone();
            async move {
                let _route = routes.enter(to);
                std::future::pending::<()>().await;
            }
        };
        let cut = tokio::time::timeout(std::time::Duration::from_millis(10), call).await;
        assert!(cut.is_err());
        assert_eq!(routes.len(), 0, "a timed-out call left its route");

        // With the stale route gone, the next call is again the only one.
        let _route = routes.enter(to);
        assert!(routes.by_origin(None).is_some());
    }
}
