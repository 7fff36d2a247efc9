//! Browser sessions over the Chrome DevTools Protocol (chromiumoxide).
//!
//! One [`Session`] per browse slice: a fresh browser context (no cookies,
//! storage, cache, service workers or permissions from any other session) in
//! one of the worker's long-lived local headless Chromium processes ([`pool`]),
//! or a connection of its own to a remote CDP endpoint (Bright Data's Scraping
//! Browser, billed per session, reached through [`relay`] because its endpoint
//! wants HTTP basic credentials the WebSocket client does not send by itself).
//!
//! Every action waits for its element the way Playwright's actions do: it polls the
//! live page until the selector matches (or the text shows), up to the step's
//! timeout, across navigations. Clicks are real mouse events at the element's
//! centre; fills focus the field, clear it and insert the text as typing does.
//!
//! Model steps work on a [`Snapshot`]: the page's visible elements as numbered lines
//! (`[e12] button "Add to cart"`), no scripts or styles, size-capped. A reference is
//! turned back into a concrete, stable CSS selector ([`Session::selector_for`]) so
//! what a model chose can be replayed without it.
//!
//! A local session's context reaches the network only through its session's
//! [`egress`] proxy, which refuses loopback, private, link-local and metadata destinations
//! unless the session's policy opens them, and connects to the very address it
//! checked. Its refusals are in [`Session::egress_log`].
//!
//! A session's [`traffic::Traffic`] counts its bytes as they arrive and holds
//! them within what the session may use (its byte limit, what the job's budget
//! paid for): a local session's proxy counts every byte it relays, both ways; a
//! remote session counts what CDP's `Network.dataReceived` reports. Traffic that
//! passes a final allowance stops: the proxy cuts its connections, and the
//! session's owner closes it ([`traffic::Traffic::stopped`]).

pub mod egress;
pub mod pool;
pub mod relay;
mod script;
pub mod traffic;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chromiumoxide::cdp::browser_protocol::browser::BrowserContextId;
use chromiumoxide::cdp::browser_protocol::input::InsertTextParams;
use chromiumoxide::cdp::browser_protocol::inspector::EventTargetCrashed;
use chromiumoxide::cdp::browser_protocol::network::{
    EventDataReceived, EventLoadingFailed, EventLoadingFinished,
};
use chromiumoxide::cdp::browser_protocol::page::CaptureScreenshotFormat;
use chromiumoxide::cdp::browser_protocol::target::{
    CreateBrowserContextParams, CreateTargetParams,
};
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use chromiumoxide::error::CdpError;
use chromiumoxide::page::ScreenshotParams;
use chromiumoxide::{Browser, Handler, Page};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// How often a waiting action looks at the page again.
const POLL: Duration = Duration::from_millis(50);
/// How long a screenshot may take (a hung page does not hold the slice).
const SCREENSHOT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where sessions run.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// A fresh browser context in one of the worker's pooled local Chromium
    /// processes ([`pool`]).
    Local {
        pool: Arc<pool::Pool>,
        /// Where it may connect: every request of the context goes through an
        /// egress proxy started for the session with this policy.
        egress: egress::Egress,
    },
    /// A running browser's DevTools WebSocket URL (`ws://…` or `wss://…`),
    /// connected once per session. User credentials in the URL are sent as
    /// HTTP basic authorization.
    Remote { url: String },
}

/// Why a browser action failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct BrowserError {
    pub kind: ErrorKind,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The browser could not be started or reached.
    Launch,
    /// A wait ran out.
    Timeout,
    /// The page does not have what the step needs (no such option, not a field).
    Page,
    /// The protocol failed (the browser went away, a command failed).
    Protocol,
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ErrorKind::Launch => "browser_launch",
            ErrorKind::Timeout => "step_timeout",
            ErrorKind::Page => "page_mismatch",
            ErrorKind::Protocol => "browser_protocol",
        })
    }
}

impl BrowserError {
    fn new(kind: ErrorKind, message: impl Into<String>) -> BrowserError {
        BrowserError {
            kind,
            message: message.into(),
        }
    }

    /// Whether trying the slice again may help.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Launch | ErrorKind::Protocol | ErrorKind::Timeout
        )
    }
}

fn protocol(e: impl std::fmt::Display) -> BrowserError {
    BrowserError::new(ErrorKind::Protocol, e.to_string())
}

/// A page reduced to what a model needs to pick an element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub url: String,
    pub title: String,
    /// One line per element: `[e12] button "Add to cart"`.
    pub text: String,
    /// Elements listed.
    pub elements: u32,
    /// Whether the cap cut the list.
    pub truncated: bool,
}

/// The task that carries a browser's DevTools connection (chromiumoxide's
/// handler), and whether it still does. A failed connection (the process
/// exited or was killed) ends it; the flag falls before the handler is
/// dropped, so a command failing because of it already sees the browser gone.
pub(crate) struct Driver {
    task: JoinHandle<()>,
    alive: Arc<AtomicBool>,
}

impl Driver {
    /// `pooled`: a local browser of the pool (`pid`), whose connection ending
    /// is unexpected.
    pub(crate) fn start(mut handler: Handler, pooled: bool, pid: Option<u32>) -> Driver {
        let alive = Arc::new(AtomicBool::new(true));
        let flag = alive.clone();
        let task = tokio::spawn(async move {
            while let Some(event) = handler.next().await {
                match event {
                    Err(e @ (CdpError::Ws(_) | CdpError::Io(_))) => {
                        if pooled {
                            tracing::warn!(?pid, error = %e, "a pooled browser went away");
                        } else {
                            tracing::info!(error = %e, "the browser connection ended");
                        }
                        break;
                    }
                    Err(e) => tracing::debug!(error = %e, "browser handler"),
                    Ok(()) => {}
                }
            }
            flag.store(false, Ordering::Release);
        });
        Driver { task, alive }
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    pub(crate) fn stop(&self) {
        self.alive.store(false, Ordering::Release);
        self.task.abort();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One browser session: one page in a browser context of its own.
pub struct Session {
    page: Page,
    conn: Conn,
    network: JoinHandle<()>,
    crash_watch: JoinHandle<()>,
    crashed: Arc<AtomicBool>,
    traffic: Arc<traffic::Traffic>,
    proxy: Option<egress::EgressProxy>,
    closed: bool,
}

/// How a session holds its browser.
enum Conn {
    /// A context of a pooled local browser, disposed at the end.
    Pooled {
        lease: pool::Lease,
        context: BrowserContextId,
    },
    /// A connection of its own to a remote browser.
    Own {
        browser: Box<Browser>,
        driver: Driver,
        _relay: Option<relay::Relay>,
    },
}

impl Session {
    /// Opens a page: in a new context of a pooled browser, or over a new
    /// connection to a remote one. Its bytes are counted into `traffic`, and
    /// held within it (see [`traffic`]).
    pub async fn open(
        endpoint: &Endpoint,
        launch_timeout: Duration,
        traffic: Arc<traffic::Traffic>,
    ) -> Result<Session, BrowserError> {
        let opened = tokio::time::timeout(
            launch_timeout,
            Session::connect(endpoint, launch_timeout, &traffic),
        )
        .await
        .map_err(|_| {
            BrowserError::new(
                ErrorKind::Launch,
                format!("no browser within {launch_timeout:?}"),
            )
        })??;
        let (page, conn, proxy) = opened;
        // A local session's bytes are its proxy's count; a remote one's are
        // counted from CDP as they arrive.
        let network = if proxy.is_some() {
            tokio::spawn(async {})
        } else {
            let events = (
                page.event_listener::<EventDataReceived>()
                    .await
                    .map_err(protocol)?,
                page.event_listener::<EventLoadingFinished>()
                    .await
                    .map_err(protocol)?,
                page.event_listener::<EventLoadingFailed>()
                    .await
                    .map_err(protocol)?,
            );
            tokio::spawn(count_cdp(events, traffic.clone()))
        };
        // A renderer that crashed (out of memory, killed) answers nothing more.
        let crashed = Arc::new(AtomicBool::new(false));
        let mut crashes = page
            .event_listener::<EventTargetCrashed>()
            .await
            .map_err(protocol)?;
        let flag = crashed.clone();
        let crash_watch = tokio::spawn(async move {
            if crashes.next().await.is_some() {
                flag.store(true, Ordering::Release);
            }
        });
        Ok(Session {
            page,
            conn,
            network,
            crash_watch,
            crashed,
            traffic,
            proxy,
            closed: false,
        })
    }

    async fn connect(
        endpoint: &Endpoint,
        launch_timeout: Duration,
        traffic: &Arc<traffic::Traffic>,
    ) -> Result<(Page, Conn, Option<egress::EgressProxy>), BrowserError> {
        let launch = |m: String| BrowserError::new(ErrorKind::Launch, m);
        match endpoint {
            Endpoint::Local { pool, egress } => {
                let proxy = egress::EgressProxy::start_metered(egress.clone(), traffic.clone())
                    .await
                    .map_err(|e| launch(format!("egress proxy: {e}")))?;
                let lease = pool.acquire(launch_timeout).await?;
                let browser = &lease.browser.browser;
                // Every request of the context through the egress proxy,
                // loopback too (Chromium bypasses proxies for loopback unless
                // told).
                let params = CreateBrowserContextParams::builder()
                    .dispose_on_detach(true)
                    .proxy_server(proxy.proxy_server())
                    .proxy_bypass_list("<-loopback>")
                    .build();
                let context = match browser.create_browser_context(params).await {
                    Ok(c) => c,
                    Err(e) => {
                        lease.check().await;
                        return Err(launch(format!("creating a browser context: {e}")));
                    }
                };
                let target = CreateTargetParams::builder()
                    .url("about:blank")
                    .browser_context_id(context.clone())
                    .build()
                    .map_err(launch)?;
                match browser.new_page(target).await {
                    Ok(page) => Ok((page, Conn::Pooled { lease, context }, Some(proxy))),
                    Err(e) => {
                        let _ = browser.dispose_browser_context(context).await;
                        lease.check().await;
                        Err(launch(format!("opening a page: {e}")))
                    }
                }
            }
            Endpoint::Remote { url } => {
                let (url, relay) = relay::Relay::for_url(url).await.map_err(launch)?;
                let (browser, handler) = Browser::connect(url)
                    .await
                    .map_err(|e| launch(format!("connecting to the browser: {e}")))?;
                let driver = Driver::start(handler, false, None);
                match browser.new_page("about:blank").await {
                    Ok(page) => Ok((
                        page,
                        Conn::Own {
                            browser: Box::new(browser),
                            driver,
                            _relay: relay,
                        },
                        None,
                    )),
                    Err(e) => Err(launch(format!("opening a page: {e}"))),
                }
            }
        }
    }

    /// Why the session can do nothing more, if so: its browser went away or
    /// its page crashed.
    fn gone(&self) -> Option<&'static str> {
        let browser_gone = match &self.conn {
            Conn::Pooled { lease, .. } => !lease.is_alive(),
            Conn::Own { driver, .. } => !driver.is_alive(),
        };
        if browser_gone {
            Some("the browser went away")
        } else if self.crashed.load(Ordering::Acquire) {
            Some("the page crashed")
        } else {
            None
        }
    }

    /// A failed command's error; when the browser is gone, that (transient:
    /// the slice runs again in another browser).
    fn failed(&self, e: impl std::fmt::Display) -> BrowserError {
        match self.gone() {
            Some(why) => BrowserError::new(ErrorKind::Protocol, format!("{why}: {e}")),
            None => protocol(e),
        }
    }

    /// The refusals of a local session's egress proxy (`None`: a remote browser,
    /// whose egress is its provider's).
    pub fn egress_log(&self) -> Option<&Arc<egress::EgressLog>> {
        self.proxy.as_ref().map(egress::EgressProxy::log)
    }

    /// Bytes of the session's traffic so far: both ways through a local
    /// session's proxy; received (encoded, as transferred) for a remote one.
    pub fn bytes(&self) -> u64 {
        self.traffic.total()
    }

    /// The session's traffic (its count, its allowance, whether it stopped).
    pub fn traffic(&self) -> &Arc<traffic::Traffic> {
        &self.traffic
    }

    /// Loads `url` and waits for its `load` event.
    pub async fn goto(&self, url: &str, timeout: Duration) -> Result<(), BrowserError> {
        match tokio::time::timeout(timeout, self.page.goto(url)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(match self.gone() {
                Some(why) => BrowserError::new(ErrorKind::Protocol, format!("{why}: {e}")),
                None => BrowserError::new(ErrorKind::Page, format!("loading {url}: {e}")),
            }),
            Err(_) => Err(BrowserError::new(
                ErrorKind::Timeout,
                format!("{url} did not load within {timeout:?}"),
            )),
        }
    }

    /// The page's URL now.
    pub async fn url(&self) -> String {
        self.page.url().await.ok().flatten().unwrap_or_default()
    }

    /// Runs `function` (a JS function expression) with `args` in the page.
    async fn call<T: DeserializeOwned>(
        &self,
        function: &str,
        args: &[Value],
    ) -> Result<T, BrowserError> {
        let args: Vec<String> = args.iter().map(Value::to_string).collect();
        let expr = format!("({function})({})", args.join(","));
        let params = EvaluateParams::builder()
            .expression(expr)
            .await_promise(true)
            .return_by_value(true)
            .build()
            .map_err(protocol)?;
        let res = self
            .page
            .evaluate_expression(params)
            .await
            .map_err(|e| self.failed(e))?;
        // `null` and `undefined` come back without a value.
        let v = res.value().cloned().unwrap_or(Value::Null);
        serde_json::from_value::<T>(v).map_err(protocol)
    }

    /// Polls `function(args)` until it returns a non-null value or `timeout` runs
    /// out; errors while the page navigates count as "not yet", unless the
    /// browser is gone or the page crashed (then the error is at once).
    async fn wait_value<T: DeserializeOwned>(
        &self,
        function: &str,
        args: &[Value],
        timeout: Duration,
        what: impl Fn() -> String,
    ) -> Result<T, BrowserError> {
        let deadline = Instant::now() + timeout;
        let mut last_error: Option<String>;
        loop {
            // A hung page or browser does not hold the step past its timeout.
            let left = deadline.saturating_duration_since(Instant::now()).max(POLL);
            match tokio::time::timeout(left, self.call::<Option<T>>(function, args)).await {
                Ok(Ok(Some(v))) => return Ok(v),
                Ok(Ok(None)) => last_error = None,
                Ok(Err(e)) if self.gone().is_some() => return Err(e),
                Ok(Err(e)) => last_error = Some(e.message),
                Err(_) => last_error = Some("the page did not answer".into()),
            }
            if Instant::now() >= deadline {
                let mut m = format!("{} within {timeout:?}", what());
                if let Some(e) = last_error {
                    m.push_str(&format!(" (last error: {e})"));
                }
                return Err(BrowserError::new(ErrorKind::Timeout, m));
            }
            tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
        }
    }

    /// Waits until `selector` matches a visible element.
    pub async fn wait_for_selector(
        &self,
        selector: &str,
        timeout: Duration,
    ) -> Result<(), BrowserError> {
        self.wait_value::<bool>(script::VISIBLE, &[json!(selector)], timeout, || {
            format!("no visible element matched {selector}")
        })
        .await
        .map(drop)
    }

    /// Waits until the page's text contains `text`.
    pub async fn wait_for_text(&self, text: &str, timeout: Duration) -> Result<(), BrowserError> {
        self.wait_value::<bool>(script::HAS_TEXT, &[json!(text)], timeout, || {
            format!("the page never showed the text {text:?}")
        })
        .await
        .map(drop)
    }

    /// Clicks the element `selector` matches (a real mouse click at its centre).
    pub async fn click(&self, selector: &str, timeout: Duration) -> Result<(), BrowserError> {
        self.wait_for_selector(selector, timeout).await?;
        let el = self
            .page
            .find_element(selector)
            .await
            .map_err(|e| self.failed(e))?;
        el.scroll_into_view().await.map_err(|e| self.failed(e))?;
        el.click().await.map_err(|e| self.failed(e))?;
        Ok(())
    }

    /// Focuses the field, clears it and types `value` into it.
    pub async fn fill(
        &self,
        selector: &str,
        value: &str,
        timeout: Duration,
    ) -> Result<(), BrowserError> {
        self.wait_for_selector(selector, timeout).await?;
        let ok: bool = self
            .call(script::CLEAR_AND_FOCUS, &[json!(selector)])
            .await?;
        if !ok {
            return Err(BrowserError::new(
                ErrorKind::Page,
                format!("{selector} is not a field that takes text"),
            ));
        }
        self.page
            .execute(InsertTextParams::new(value))
            .await
            .map_err(|e| self.failed(e))?;
        let _: bool = self.call(script::CHANGED, &[json!(selector)]).await?;
        Ok(())
    }

    /// Chooses the option of the `<select>` whose value or label is `value`.
    pub async fn select(
        &self,
        selector: &str,
        value: &str,
        timeout: Duration,
    ) -> Result<(), BrowserError> {
        self.wait_for_selector(selector, timeout).await?;
        let r: Value = self
            .call(script::SELECT, &[json!(selector), json!(value)])
            .await?;
        match r.as_str() {
            Some("ok") => Ok(()),
            Some(why) => Err(BrowserError::new(
                ErrorKind::Page,
                format!("{selector}: {why}"),
            )),
            None => Err(BrowserError::new(
                ErrorKind::Page,
                format!("{selector}: not selectable"),
            )),
        }
    }

    /// Chooses the `<option>` `selector` matches in its `<select>`.
    pub async fn choose_option(
        &self,
        selector: &str,
        timeout: Duration,
    ) -> Result<(), BrowserError> {
        let ok: bool = self
            .wait_value(script::CHOOSE_OPTION, &[json!(selector)], timeout, || {
                format!("no option matched {selector}")
            })
            .await?;
        if ok {
            Ok(())
        } else {
            Err(BrowserError::new(
                ErrorKind::Page,
                format!("{selector} is not an option of a <select>"),
            ))
        }
    }

    /// Scrolls a viewport height `times` times.
    pub async fn scroll_times(&self, times: u32) -> Result<(), BrowserError> {
        for _ in 0..times {
            let _: bool = self.call(script::SCROLL, &[]).await?;
            // Let what a scroll triggers (lazy loading) start before the next one.
            let _: bool = self.call(script::NEXT_FRAME, &[]).await?;
        }
        Ok(())
    }

    /// Scrolls until `selector` matches, up to `timeout`.
    pub async fn scroll_until(
        &self,
        selector: &str,
        timeout: Duration,
    ) -> Result<(), BrowserError> {
        self.wait_value::<bool>(script::SCROLL_UNTIL, &[json!(selector)], timeout, || {
            format!("scrolling never showed {selector}")
        })
        .await
        .map(drop)
    }

    /// The live DOM serialized as HTML.
    pub async fn html(&self) -> Result<String, BrowserError> {
        self.call(script::HTML, &[]).await
    }

    /// A marker for "this page": set in the document, gone once it navigates.
    pub async fn mark(&self) -> Result<String, BrowserError> {
        self.call(script::MARK, &[]).await
    }

    /// Waits until the page marked `mark` is gone (navigated) and loaded, or its
    /// `selector` content changed (a page rendered in place), with `selector`
    /// matching again.
    pub async fn wait_for_change(
        &self,
        mark: &str,
        selector: &str,
        before: &str,
        timeout: Duration,
    ) -> Result<(), BrowserError> {
        self.wait_value::<bool>(
            script::CHANGED_SINCE,
            &[json!(mark), json!(selector), json!(before)],
            timeout,
            || format!("the page did not change after going to the next page ({selector})"),
        )
        .await
        .map(drop)
    }

    /// The outer HTML of everything `selector` matches, joined: what a page looks
    /// like before an action changes it.
    pub async fn fingerprint(&self, selector: &str) -> Result<String, BrowserError> {
        self.call(script::FINGERPRINT, &[json!(selector)]).await
    }

    /// Whether `selector` matches a visible element now (no waiting).
    pub async fn is_visible(&self, selector: &str) -> Result<bool, BrowserError> {
        Ok(self
            .call::<Option<bool>>(script::VISIBLE, &[json!(selector)])
            .await?
            .unwrap_or(false))
    }

    /// Whether `selector` matches exactly one element now.
    pub async fn matches_one(&self, selector: &str) -> Result<bool, BrowserError> {
        self.call(script::MATCHES_ONE, &[json!(selector)]).await
    }

    /// The visible text of the first element `selector` matches (form fields: their value).
    pub async fn text_of(&self, selector: &str) -> Result<Option<String>, BrowserError> {
        self.call(script::TEXT_OF, &[json!(selector)]).await
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Result<Vec<u8>, BrowserError> {
        let shot = self.page.screenshot(
            ScreenshotParams::builder()
                .format(CaptureScreenshotFormat::Png)
                .build(),
        );
        match tokio::time::timeout(SCREENSHOT_TIMEOUT, shot).await {
            Ok(r) => r.map_err(|e| self.failed(e)),
            Err(_) => Err(BrowserError::new(
                ErrorKind::Protocol,
                format!("no screenshot within {SCREENSHOT_TIMEOUT:?}"),
            )),
        }
    }

    /// A PNG of the viewport with every field and text that shows one of
    /// `values` (or that `selectors` match) covered by a black box, laid over
    /// the page for the screenshot and removed after it. No screenshot when
    /// the boxes could not be laid.
    pub async fn screenshot_masked(
        &self,
        values: &[String],
        selectors: &[String],
    ) -> Result<Vec<u8>, BrowserError> {
        if values.is_empty() && selectors.is_empty() {
            return self.screenshot().await;
        }
        let masked = tokio::time::timeout(
            SCREENSHOT_TIMEOUT,
            self.call::<u64>(script::MASK, &[json!(values), json!(selectors)]),
        )
        .await;
        match masked {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(BrowserError::new(
                    e.kind,
                    format!("the page's secrets could not be masked: {}", e.message),
                ));
            }
            Err(_) => {
                return Err(BrowserError::new(
                    ErrorKind::Protocol,
                    format!("the page's secrets could not be masked within {SCREENSHOT_TIMEOUT:?}"),
                ));
            }
        }
        let shot = self.screenshot().await;
        let _ =
            tokio::time::timeout(SCREENSHOT_TIMEOUT, self.call::<bool>(script::UNMASK, &[])).await;
        shot
    }

    /// The page's visible elements as numbered lines, at most `max_bytes` of them.
    pub async fn snapshot(&self, max_bytes: usize) -> Result<Snapshot, BrowserError> {
        let v: Value = self.call(script::SNAPSHOT, &[json!(max_bytes)]).await?;
        Ok(Snapshot {
            url: v["url"].as_str().unwrap_or_default().to_owned(),
            title: v["title"].as_str().unwrap_or_default().to_owned(),
            text: v["text"].as_str().unwrap_or_default().to_owned(),
            elements: v["elements"].as_u64().unwrap_or(0) as u32,
            truncated: v["truncated"].as_bool().unwrap_or(false),
        })
    }

    /// A stable CSS selector for the element a snapshot numbered `reference`
    /// (`e12`): its id, a unique test id, name or label, else its path. `None`
    /// when no element has that reference.
    pub async fn selector_for(&self, reference: &str) -> Result<Option<String>, BrowserError> {
        self.call(script::SELECTOR_FOR, &[json!(reference)]).await
    }

    /// The tag (and for inputs, type) of the element `selector` matches.
    pub async fn describe(&self, selector: &str) -> Result<Option<String>, BrowserError> {
        self.call(script::DESCRIBE, &[json!(selector)]).await
    }

    /// Ends the session: a pooled context is disposed with everything in it
    /// (a browser that does not answer is killed and replaced); a remote
    /// browser is closed.
    pub async fn close(mut self) {
        const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
        match &mut self.conn {
            Conn::Pooled { lease, context } => {
                let browser = &lease.browser.browser;
                let disposed = tokio::time::timeout(
                    CLOSE_TIMEOUT,
                    browser.dispose_browser_context(context.clone()),
                )
                .await;
                if !matches!(disposed, Ok(Ok(()))) {
                    lease.check().await;
                }
            }
            Conn::Own { browser, .. } => {
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, browser.close()).await;
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, browser.wait()).await;
            }
        }
        self.closed = true;
        self.stop_tasks();
    }

    fn stop_tasks(&self) {
        self.network.abort();
        self.crash_watch.abort();
        if let Conn::Own { driver, .. } = &self.conn {
            driver.stop();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A session dropped without close (a cancelled slice): its context is
        // disposed in the background; a remote connection just ends.
        self.stop_tasks();
        if let Conn::Pooled { lease, context } = &self.conn
            && !self.closed
            && lease.is_alive()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let browser = lease.browser.clone();
            let context = context.clone();
            rt.spawn(async move {
                let _ = browser.browser.dispose_browser_context(context).await;
            });
        }
    }
}

/// Counts a remote session's traffic from CDP: each `Network.dataReceived`
/// chunk as it arrives (a response that never ends is counted as it streams),
/// and at `Network.loadingFinished` what its total has beyond the chunks (the
/// headers). What the browser sends is not reported by CDP per chunk and is not
/// counted here.
async fn count_cdp(
    (mut data, mut finished, mut failed): (
        chromiumoxide::listeners::EventStream<EventDataReceived>,
        chromiumoxide::listeners::EventStream<EventLoadingFinished>,
        chromiumoxide::listeners::EventStream<EventLoadingFailed>,
    ),
    traffic: Arc<traffic::Traffic>,
) {
    use std::collections::HashMap;
    let mut chunks: HashMap<String, u64> = HashMap::new();
    loop {
        tokio::select! {
            Some(ev) = data.next() => {
                let n = ev.encoded_data_length.max(0) as u64;
                *chunks.entry(ev.request_id.inner().clone()).or_default() += n;
                traffic.add(traffic::Direction::Received, n);
            }
            Some(ev) = finished.next() => {
                let total = ev.encoded_data_length.max(0.0) as u64;
                let seen = chunks.remove(ev.request_id.inner()).unwrap_or(0);
                traffic.add(traffic::Direction::Received, total.saturating_sub(seen));
            }
            Some(ev) = failed.next() => {
                chunks.remove(ev.request_id.inner());
            }
            else => return,
        }
    }
}

/// A Chromium (or Chrome) executable on `PATH`, the first of the usual names.
pub fn find_chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for name in [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ] {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Bright Data's Scraping Browser endpoint.
pub const SCRAPING_BROWSER: &str = "wss://brd.superproxy.io:9222";

/// The Scraping Browser URL of a zone, from a country when given:
/// `wss://brd-customer-<id>-zone-<zone>[-country-<cc>]:<password>@brd.superproxy.io:9222`
/// for `endpoint` = [`SCRAPING_BROWSER`].
pub fn scraping_browser_url(
    endpoint: &str,
    customer: &str,
    zone: &str,
    password: &str,
    country: Option<&str>,
) -> String {
    let mut user = format!("brd-customer-{customer}-zone-{zone}");
    if let Some(cc) = country {
        user.push_str("-country-");
        user.push_str(&cc.to_ascii_lowercase());
    }
    let (scheme, rest) = endpoint.split_once("://").unwrap_or(("wss", endpoint));
    format!("{scheme}://{user}:{password}@{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scraping_browser_urls_carry_zone_and_country() {
        assert_eq!(
            scraping_browser_url(
                SCRAPING_BROWSER,
                "c_1234",
                "scraping_browser1",
                "pw",
                Some("DE")
            ),
            "wss://brd-customer-c_1234-zone-scraping_browser1-country-de:pw@brd.superproxy.io:9222"
        );
        assert_eq!(
            scraping_browser_url(SCRAPING_BROWSER, "c_1234", "sb", "pw", None),
            "wss://brd-customer-c_1234-zone-sb:pw@brd.superproxy.io:9222"
        );
    }
}
