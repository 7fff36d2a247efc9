//! The tool layer's embeddings service over the real model
//! (`tests/models/fetch`) and an in-memory store: what it computes, what it
//! takes from the process and from the store instead.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use trawl_core::ports::Store;
use trawl_embed::{Embedder, cosine, testing::model_dir};
use trawl_store::SqliteStore;
use trawl_tools::embed::{Embeddings, key};

/// A model of this test's own, so its count of texts run is this test's.
fn embedder() -> Arc<Embedder> {
    Arc::new(Embedder::load(&model_dir()).unwrap())
}

fn texts(t: &[&str]) -> Vec<String> {
    t.iter().map(|s| (*s).to_owned()).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[tokio::test]
async fn a_warm_call_runs_neither_model_nor_store() {
    let model = embedder();
    let store = Arc::new(SqliteStore::memory().await.unwrap());
    let e = Embeddings::new(model.clone(), Some(store.clone()));
    let cold = e
        .vectors(&texts(&[
            "Reads a file.",
            "Writes a file.",
            "Reads a file.",
        ]))
        .await
        .unwrap();
    // The repeated text is embedded once, and gets the same vector.
    assert_eq!(model.texts_run(), 2);
    assert_eq!(cold.len(), 3);
    assert!(Arc::ptr_eq(&cold[0], &cold[2]));
    assert_eq!(cold[0].len(), 384);
    assert!(cosine(&cold[0], &cold[1]) < 0.999);

    // The store goes away: a warm call does not need it.
    store.close().await;
    let warm = e
        .vectors(&texts(&["Writes a file.", "Reads a file."]))
        .await
        .unwrap();
    assert_eq!(model.texts_run(), 2, "the model ran again");
    assert_eq!(bits(&warm[0]), bits(&cold[1]));
    assert_eq!(bits(&warm[1]), bits(&cold[0]));

    // A new text among known ones: only it is run (the store, closed, is
    // skipped with a warning).
    let mixed = e
        .vectors(&texts(&["Reads a file.", "Deletes a file."]))
        .await
        .unwrap();
    assert_eq!(model.texts_run(), 3);
    assert_eq!(bits(&mixed[0]), bits(&cold[0]));
    assert!(e.vectors(&[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_store_serves_a_second_instance_without_running_the_model() {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::memory().await.unwrap());
    let (first_model, second_model) = (embedder(), embedder());
    let first = Embeddings::new(first_model.clone(), Some(store.clone()));
    let asked = texts(&[
        "Sends an email to a recipient.",
        "Lists the open pull requests of a repository.",
    ]);
    let computed = first.vectors(&asked).await.unwrap();
    assert_eq!(first_model.texts_run(), 2);

    // Stored under the weights' id and the text's sha256, bit for bit.
    let id = first_model.model_id();
    let stored = store.embeddings(id, &[key(&asked[0])]).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(bits(&stored[0].1), bits(&computed[0]));
    assert!(
        store
            .embeddings("other-weights", &[key(&asked[0])])
            .await
            .unwrap()
            .is_empty()
    );

    // Another process (another instance, another load) on the same store.
    let second = Embeddings::new(second_model.clone(), Some(store.clone()));
    let served = second.vectors(&asked).await.unwrap();
    assert_eq!(second_model.texts_run(), 0, "the second model ran");
    for (a, b) in computed.iter().zip(&served) {
        assert_eq!(bits(a), bits(b));
    }
    let more = second
        .vectors(&texts(&[
            "Sends an email to a recipient.",
            "Books a flight.",
        ]))
        .await
        .unwrap();
    assert_eq!(second_model.texts_run(), 1);
    assert_eq!(bits(&more[0]), bits(&computed[0]));
}

#[tokio::test]
async fn the_process_keeps_a_bounded_number_of_vectors() {
    let model = embedder();
    let e = Embeddings::new(model.clone(), None).with_memo_capacity(2);
    for t in ["one", "two", "three"] {
        e.vectors(&texts(&[t])).await.unwrap();
    }
    assert_eq!(model.texts_run(), 3);
    // The two most recent are kept; the first was let go, and without a store
    // it is computed again.
    e.vectors(&texts(&["two", "three"])).await.unwrap();
    assert_eq!(model.texts_run(), 3);
    e.vectors(&texts(&["one"])).await.unwrap();
    assert_eq!(model.texts_run(), 4);
}

#[tokio::test]
async fn a_model_folder_loads_in_the_background() {
    let e = Embeddings::load(&model_dir(), None).await.unwrap();
    assert_eq!(e.embedder().dims(), 384);
    let missing = Embeddings::load(std::path::Path::new("/nonexistent/model"), None)
        .await
        .unwrap_err();
    assert!(missing.to_string().contains("config.json"), "{missing}");
}
