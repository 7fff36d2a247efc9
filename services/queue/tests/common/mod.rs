//! What the JetStream test files share.

use trawl_queue::{Nats, NatsConfig};

/// Deletes a prefix's streams when dropped, so a failing test cleans up too.
pub struct Cleanup(pub NatsConfig);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let config = self.0.clone();
        // A thread with its own runtime: this may run inside a test's runtime.
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                match Nats::connect(config).await {
                    Ok(nats) => {
                        if let Err(e) = nats.delete_streams().await {
                            eprintln!("cleanup: {e}");
                        }
                    }
                    Err(e) => eprintln!("cleanup: {e}"),
                }
            });
        });
        let _ = done.join();
    }
}
