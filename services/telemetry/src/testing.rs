//! What tests need of logging: every line the process logs, captured.

use std::sync::{Arc, Mutex, OnceLock};

/// Every line logged at info and above, from the first call on, without colour.
/// One subscriber for the whole process (a role's tasks run on every runtime
/// thread, where a thread-local subscriber would miss them); later calls share
/// it.
#[derive(Clone, Debug)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Installs the capture as the process's subscriber, the first time.
    ///
    /// # Panics
    ///
    /// When another global subscriber was installed first.
    pub fn install() -> CapturedLogs {
        static LOGS: OnceLock<CapturedLogs> = OnceLock::new();
        LOGS.get_or_init(|| {
            let logs = CapturedLogs(Arc::default());
            let sink = logs.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_max_level(tracing::Level::INFO)
                .with_writer(move || sink.clone())
                .finish();
            #[allow(clippy::expect_used)] // a test set up wrong, said at once
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
            logs
        })
        .clone()
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// The lines that contain every one of `needles`.
    pub fn lines_with(&self, needles: &[&str]) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .map(str::to_owned)
            .collect()
    }
}

impl std::io::Write for CapturedLogs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
