//! A worker's pool of long-lived local Chromium processes.
//!
//! Starting Chromium costs about a second and a quarter of this machine's CPU,
//! more than the five steps of a typical slice. The pool keeps at most
//! [`PoolConfig::max_browsers`] processes and runs each session in a browser
//! context of its own (`Target.createBrowserContext`): cookies, storage, cache,
//! service workers and permissions live in the context and are thrown away
//! with it (`Target.disposeBrowserContext`), so nothing passes from one slice
//! to the next. Each context has its own proxy, the session's egress proxy.
//!
//! - A new session goes to the live browser with the fewest sessions; a second
//!   browser is started while the first is busy and there is room.
//! - A browser that has begun [`PoolConfig::sessions_per_browser`] sessions
//!   takes no more and is closed once its last one ends (a long-lived browser
//!   gathers memory).
//! - A browser whose DevTools connection fails (its process exited or was
//!   killed) is marked dead at once: its sessions' commands fail (transient,
//!   the slice is tried again) and the next session starts a new browser. One
//!   that does not answer `Browser.getVersion` within [`HEALTH_TIMEOUT`] after
//!   a context could not be closed is killed the same way (hung).
//! - The browsers' own traffic outside contexts goes to a proxy that connects
//!   nowhere.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::browser::GetVersionParams;
use chromiumoxide::{Browser, BrowserConfig};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::egress::{BoxFuture, Dial, Egress, EgressProxy};
use crate::{BrowserError, Driver, ErrorKind, find_chromium};

/// Chromium features the pooled browsers run without.
const DISABLED_FEATURES: &str = "NetworkPrediction,DnsOverHttps,TranslateUI,Translate,\
OptimizationHints,MediaRouter,DialMediaRouteProvider,GlobalMediaControls,\
AutofillServerCommunication,CertificateTransparencyComponentUpdater,\
InterestFeedContentSuggestions,BackForwardCache,PaintHolding,LensOverlay,\
WebUIOmniboxPopup,WebUIOmniboxAimPopup";

/// How long a browser may take to answer a health check.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// How many browsers, how long each lives.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// The executable; `None`: found on `PATH` (`chromium`, `google-chrome`, …).
    pub executable: Option<PathBuf>,
    /// Chromium processes at most (`TRAWL_BROWSER_POOL`, default 2).
    pub max_browsers: usize,
    /// Sessions a browser runs before it is replaced (`TRAWL_BROWSER_RECYCLE`,
    /// default 200).
    pub sessions_per_browser: u32,
}

impl Default for PoolConfig {
    fn default() -> PoolConfig {
        PoolConfig {
            executable: None,
            max_browsers: 2,
            sessions_per_browser: 200,
        }
    }
}

/// What the pool holds now and has done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Browsers started since the pool was made.
    pub launched: u64,
    /// Process ids of the browsers in the pool now (live or draining).
    pub pids: Vec<u32>,
    /// Sessions running now.
    pub active: u32,
    /// Browsers most ever running at once.
    pub peak: usize,
}

/// Long-lived local browsers, shared by a worker's sessions.
pub struct Pool {
    config: PoolConfig,
    state: Mutex<State>,
    changed: Notify,
    launched: AtomicU64,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    browsers: Vec<Arc<Pooled>>,
    /// Browsers being started (they count against the bound).
    launching: usize,
    peak: usize,
}

/// One pooled Chromium.
pub(crate) struct Pooled {
    pub(crate) browser: Browser,
    pid: Option<u32>,
    driver: Driver,
    /// Sessions begun in it.
    begun: AtomicU32,
    /// Sessions running in it.
    active: AtomicU32,
    /// Takes no new sessions; closed when the last one ends.
    retiring: AtomicBool,
    _profile: tempfile::TempDir,
    _nowhere: EgressProxy,
}

impl Pooled {
    pub(crate) fn is_alive(&self) -> bool {
        self.driver.is_alive()
    }

    /// Kills the process (its sessions fail at once).
    fn kill(&self) {
        self.driver.stop();
        if let Some(pid) = self.pid.and_then(|p| i32::try_from(p).ok()) {
            // The child is owned by `browser`, which needs `&mut` to kill it;
            // it is not reaped before `browser` drops, so the pid is still its.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(child) = self.browser.get_mut_child() {
            let _ = child.as_mut_inner().start_kill();
        }
    }
}

/// A session's claim on a pooled browser; released when dropped.
pub struct Lease {
    pool: Arc<Pool>,
    pub(crate) browser: Arc<Pooled>,
}

impl Lease {
    pub(crate) fn is_alive(&self) -> bool {
        self.browser.is_alive()
    }

    /// Asks the browser for its version; one that does not answer within
    /// [`HEALTH_TIMEOUT`] is killed (it is hung) and replaced by the next
    /// session.
    pub(crate) async fn check(&self) {
        if !self.is_alive() {
            return;
        }
        let answer = tokio::time::timeout(
            HEALTH_TIMEOUT,
            self.browser.browser.execute(GetVersionParams::default()),
        )
        .await;
        if !matches!(answer, Ok(Ok(_))) {
            tracing::warn!(pid = ?self.browser.pid, "a pooled browser did not answer; killing it");
            self.browser.kill();
            self.pool
                .lock()
                .browsers
                .retain(|b| !Arc::ptr_eq(b, &self.browser));
            self.pool.changed.notify_waiters();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let left = self.browser.active.fetch_sub(1, Ordering::AcqRel) - 1;
        if left == 0 && self.browser.retiring.load(Ordering::Acquire) {
            self.pool
                .lock()
                .browsers
                .retain(|b| !Arc::ptr_eq(b, &self.browser));
        }
        self.pool.changed.notify_waiters();
    }
}

/// A browser being started: it counts against the bound until it is in the
/// list or has failed, even when the session waiting for it is dropped.
struct Launching<'a>(&'a Pool);

impl Drop for Launching<'_> {
    fn drop(&mut self) {
        self.0.lock().launching -= 1;
        self.0.changed.notify_waiters();
    }
}

enum Next {
    Lease(Lease),
    Launch,
    Wait,
}

impl Pool {
    pub fn new(config: PoolConfig) -> Arc<Pool> {
        Arc::new(Pool {
            config: PoolConfig {
                max_browsers: config.max_browsers.max(1),
                sessions_per_browser: config.sessions_per_browser.max(1),
                ..config
            },
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            launched: AtomicU64::new(0),
        })
    }

    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the list consistent (every
        // change is one push or retain).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn stats(&self) -> PoolStats {
        let s = self.lock();
        PoolStats {
            launched: self.launched.load(Ordering::Relaxed),
            pids: s.browsers.iter().filter_map(|b| b.pid).collect(),
            active: s
                .browsers
                .iter()
                .map(|b| b.active.load(Ordering::Relaxed))
                .sum(),
            peak: s.peak,
        }
    }

    /// A browser for one session: the least busy live one, or a new one while
    /// there is room, else the next to free up.
    pub async fn acquire(
        self: &Arc<Self>,
        launch_timeout: Duration,
    ) -> Result<Lease, BrowserError> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.next() {
                Next::Lease(lease) => return Ok(lease),
                Next::Wait => changed.await,
                Next::Launch => {
                    // Released however this ends, a cancelled session too.
                    let _slot = Launching(self);
                    let browser = self.launch(launch_timeout).await?;
                    self.launched.fetch_add(1, Ordering::Relaxed);
                    let mut s = self.lock();
                    s.browsers.push(Arc::new(browser));
                    s.peak = s.peak.max(s.browsers.len());
                }
            }
        }
    }

    fn next(self: &Arc<Self>) -> Next {
        let mut s = self.lock();
        // A dead browser leaves the pool; its sessions hold it until they end.
        s.browsers.retain(|b| b.is_alive());
        let best = s
            .browsers
            .iter()
            .filter(|b| !b.retiring.load(Ordering::Acquire))
            .min_by_key(|b| b.active.load(Ordering::Acquire))
            .cloned();
        let room = s.browsers.len() + s.launching < self.config.max_browsers;
        match best {
            Some(b) if b.active.load(Ordering::Acquire) == 0 || !room => {
                b.active.fetch_add(1, Ordering::AcqRel);
                let begun = b.begun.fetch_add(1, Ordering::AcqRel) + 1;
                if begun >= self.config.sessions_per_browser {
                    b.retiring.store(true, Ordering::Release);
                }
                Next::Lease(Lease {
                    pool: self.clone(),
                    browser: b,
                })
            }
            _ if room => {
                s.launching += 1;
                Next::Launch
            }
            _ => Next::Wait,
        }
    }

    async fn launch(&self, launch_timeout: Duration) -> Result<Pooled, BrowserError> {
        let launch_error = |m: String| BrowserError::new(ErrorKind::Launch, m);
        // Traffic outside a session's context (there should be none) goes to
        // a proxy that dials nowhere.
        let nowhere = EgressProxy::start(Egress::default().with_dialer(Arc::new(Nowhere)))
            .await
            .map_err(|e| launch_error(format!("browser's own proxy: {e}")))?;
        let profile = tempfile::Builder::new()
            .prefix("trawl-browser-")
            .tempdir()
            .map_err(|e| launch_error(format!("profile folder: {e}")))?;
        // chromiumoxide adds the leading `--` to every argument.
        let mut config = BrowserConfig::builder()
            .no_sandbox()
            .arg("disable-gpu")
            .arg("disable-background-networking")
            .arg(("proxy-server", nowhere.proxy_server().as_str()))
            .arg(("proxy-bypass-list", "<-loopback>"))
            // No traffic around the proxies: no QUIC, no UDP WebRTC outside
            // them, no DNS prefetching or background requests.
            .arg("disable-quic")
            .arg(("force-webrtc-ip-handling-policy", "disable_non_proxied_udp"))
            .arg(("webrtc-ip-handling-policy", "disable_non_proxied_udp"))
            .arg("dns-prefetch-disable")
            // One value for all: Chromium keeps the last `--disable-features`
            // (chromiumoxide's default, TranslateUI, is repeated here). Besides
            // traffic of its own, this turns off what a browser context costs
            // without serving a page: the omnibox's WebUI popups (two renderer
            // processes per context in headless Chromium 156) and the back/forward
            // cache, media router, translate, lens and feed services
            // (docs/benchmarks.md, "Browse slices in a browser pool").
            .arg(("disable-features", DISABLED_FEATURES))
            .arg("no-default-browser-check")
            .arg("mute-audio")
            .arg("disable-component-update")
            .arg("disable-domain-reliability")
            .arg("disable-sync")
            .arg("no-pings")
            // Containers give /dev/shm 64 MB; Chromium then writes to /tmp.
            .arg("disable-dev-shm-usage")
            .user_data_dir(profile.path())
            .launch_timeout(launch_timeout);
        if let Some(exe) = self.config.executable.clone().or_else(find_chromium) {
            let exe = match tied_to_parent(&exe, profile.path()) {
                Ok(Some(wrapper)) => wrapper,
                Ok(None) => exe,
                Err(e) => return Err(launch_error(format!("launcher script: {e}"))),
            };
            config = config.chrome_executable(exe);
        }
        let config = config.build().map_err(launch_error)?;
        let (mut browser, handler) = tokio::time::timeout(launch_timeout, Browser::launch(config))
            .await
            .map_err(|_| launch_error(format!("no browser within {launch_timeout:?}")))?
            .map_err(|e| launch_error(format!("starting Chromium: {e}")))?;
        let pid = browser.get_mut_child().and_then(|c| c.as_mut_inner().id());
        let driver = Driver::start(handler, true, pid);
        tracing::info!(?pid, "browser started for the pool");
        Ok(Pooled {
            browser,
            pid,
            driver,
            begun: AtomicU32::new(0),
            active: AtomicU32::new(0),
            retiring: AtomicBool::new(false),
            _profile: profile,
            _nowhere: nowhere,
        })
    }
}

/// Where util-linux's `setpriv` is (Debian: always; it is essential).
const SETPRIV: &str = "/usr/bin/setpriv";

/// A launcher for `exe` that dies with this process: a script in `dir` that
/// runs it under `setpriv --pdeathsig KILL`, so a worker killed outright
/// (SIGKILL, an OOM kill) takes its browsers with it instead of leaving them
/// running on the host. `None` where `setpriv` is missing or `dir` does not
/// allow programs to run (Docker's tmpfs is `noexec`; in a container the
/// browsers end with it anyway): the browser then outlives a killed worker. The signal follows the
/// thread that started the browser; the pool starts browsers from the
/// runtime's worker threads, which live as long as the process.
fn tied_to_parent(exe: &std::path::Path, dir: &std::path::Path) -> io::Result<Option<PathBuf>> {
    use std::os::unix::fs::PermissionsExt as _;
    if !std::path::Path::new(SETPRIV).is_file() {
        return Ok(None);
    }
    let noexec = nix::sys::statvfs::statvfs(dir)
        .map(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_NOEXEC))
        .unwrap_or(true);
    if noexec {
        return Ok(None);
    }
    let path = exe.to_string_lossy();
    if path.contains('\'') {
        return Ok(None);
    }
    let script = dir.join("chromium-tied");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nexec {SETPRIV} --pdeathsig KILL -- '{path}' \"$@\"\n"),
    )?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700))?;
    Ok(Some(script))
}

/// A dialer that connects nowhere.
struct Nowhere;

impl Dial for Nowhere {
    fn dial(&self, _addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        Box::pin(async {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "traffic outside a session's browser context",
            ))
        })
    }
}
