//! Prints the vector of each line of standard input as a JSON line
//! (`{"text": …, "vector": […]}`), for comparing with another implementation:
//!
//! ```text
//! printf 'A man is eating food.\n' | cargo run -p trawl-embed --example vectors [-- MODEL_DIR]
//! ```

use std::io::BufRead;
use std::path::PathBuf;

use trawl_embed::Embedder;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/models/all-minilm-l6-v2"),
        PathBuf::from,
    );
    let model = Embedder::load(&dir)?;
    let lines: Vec<String> = std::io::stdin().lock().lines().collect::<Result<_, _>>()?;
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    for (text, vector) in lines.iter().zip(model.embed(&refs)?) {
        println!("{}", serde_json::json!({"text": text, "vector": vector}));
    }
    Ok(())
}
