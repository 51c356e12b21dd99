//! Helpers for `bench/seal`: a synthetic checkpoint generator and
//! measurements of the per-byte work sealing does.
//!
//! ```text
//! cargo run --release -p sealvol-client --example seal_bench -- gen DIR SIZE_MIB [--shards N]
//! cargo run --release -p sealvol-client --example seal_bench -- primitives [SIZE_MIB]
//! cargo run --release -p sealvol-client --example seal_bench -- decode [N_CHUNKS]
//! cargo run --release -p sealvol-client --example seal_bench -- dedup OLD NEW [--params MIN,AVG,MAX]...
//! ```
//!
//! `gen` writes a safetensors-like checkpoint (8-byte header length, JSON
//! header, bf16-looking tensor data) plus small `config.json` and
//! `tokenizer.json`; `primitives` prints FastCDC, SHA-256 and BLAKE3
//! throughput on one core and on all cores as one JSON line; `decode` times
//! `TreeIndex::decode` of a large index and prints one JSON line; `dedup`
//! seals two versions of a folder with each set of chunking parameters
//! (default: SPEC.md §4.1's) and prints, per set, what the second shares
//! with the first: the bytes of its chunks the first lacks (what a push of
//! it sends) against the bytes that differ, one JSON line each.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use sealvol_spec::tree::{ChunkRef, Entry, EntryData};
use sealvol_spec::{B3Digest, ChunkingParams, Sha256Digest, TreeIndex};
use sha2::Digest as _;

const MIB: u64 = 1 << 20;
const KEY: &str = "sealvol bench";

const HIDDEN: u64 = 2048;
const INTERMEDIATE: u64 = 5632;
const KV: u64 = 256;
const VOCAB: u64 = 32000;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("gen") => gen(&args[1..]),
        Some("primitives") => primitives(&args[1..]),
        Some("decode") => decode(&args[1..]),
        Some("dedup") => dedup(&args[1..]),
        _ => Err(usage()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("seal_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> String {
    "usage: seal_bench gen DIR SIZE_MIB [--shards N] | primitives [SIZE_MIB] | decode [N_CHUNKS] | dedup OLD NEW [--params MIN,AVG,MAX]..."
        .to_string()
}

fn parse<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("{what}: cannot parse {s:?}"))
}

/// Turns uniformly random bytes into plausible little-endian bf16 weights:
/// random sign, exponents in a narrow band (|w| in [2^-10, 2^-2)), and a
/// mantissa whose two lowest bits are cleared, so the data is neither pure
/// noise nor trivially compressible.
fn bf16ify(buf: &mut [u8]) {
    for v in buf.chunks_exact_mut(2) {
        let r = u16::from_le_bytes([v[0], v[1]]);
        let sign = r >> 15;
        let exp = 117 + ((r >> 7) & 0x7);
        let mantissa = r & 0x7c;
        let bits = (sign << 15) | (exp << 7) | mantissa;
        v.copy_from_slice(&bits.to_le_bytes());
    }
}

/// Deterministic bf16-looking data for `name`.
fn weights(name: &str) -> blake3::OutputReader {
    let mut h = blake3::Hasher::new_derive_key(KEY);
    h.update(name.as_bytes());
    h.finalize_xof()
}

struct Tensor {
    name: String,
    shape: [u64; 2],
}

impl Tensor {
    fn new(name: String, rows: u64, cols: u64) -> Tensor {
        Tensor {
            name,
            shape: [rows, cols],
        }
    }

    fn bytes(&self) -> u64 {
        self.shape[0] * self.shape[1] * 2
    }
}

/// Llama-like tensors, in checkpoint order, without end: the embedding,
/// then layer after layer.
fn templates() -> impl Iterator<Item = Tensor> {
    let embed = Tensor::new("model.embed_tokens.weight".into(), VOCAB, HIDDEN);
    let layers = (0u64..).flat_map(|layer| {
        let p = format!("model.layers.{layer}");
        [
            Tensor::new(format!("{p}.input_layernorm.weight"), 1, HIDDEN),
            Tensor::new(format!("{p}.self_attn.q_proj.weight"), HIDDEN, HIDDEN),
            Tensor::new(format!("{p}.self_attn.k_proj.weight"), KV, HIDDEN),
            Tensor::new(format!("{p}.self_attn.v_proj.weight"), KV, HIDDEN),
            Tensor::new(format!("{p}.self_attn.o_proj.weight"), HIDDEN, HIDDEN),
            Tensor::new(format!("{p}.post_attention_layernorm.weight"), 1, HIDDEN),
            Tensor::new(format!("{p}.mlp.gate_proj.weight"), INTERMEDIATE, HIDDEN),
            Tensor::new(format!("{p}.mlp.up_proj.weight"), INTERMEDIATE, HIDDEN),
            Tensor::new(format!("{p}.mlp.down_proj.weight"), HIDDEN, INTERMEDIATE),
        ]
    });
    std::iter::once(embed).chain(layers)
}

/// The next tensors of `it` whose data adds up to about `budget` bytes; a
/// tensor that does not fit whole is cut short (fewer rows).
fn take_tensors(
    it: &mut std::iter::Peekable<impl Iterator<Item = Tensor>>,
    budget: u64,
) -> Vec<Tensor> {
    let mut out = Vec::new();
    let mut left = budget;
    while let Some(t) = it.peek() {
        let row = t.shape[1] * 2;
        let rows = t.shape[0].min(left / row);
        if rows == 0 {
            break;
        }
        let t = it.next().expect("peeked");
        left -= rows * row;
        out.push(Tensor::new(t.name, rows, t.shape[1]));
    }
    out
}

fn safetensors_header(tensors: &[Tensor]) -> Vec<u8> {
    let mut json = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    let mut offset = 0u64;
    for t in tensors {
        let end = offset + t.bytes();
        // A norm weight is a vector; everything else a matrix.
        let shape = if t.name.ends_with("layernorm.weight") && t.shape[0] == 1 {
            format!("[{}]", t.shape[1])
        } else {
            format!("[{},{}]", t.shape[0], t.shape[1])
        };
        write!(
            json,
            ",\"{}\":{{\"dtype\":\"BF16\",\"shape\":{shape},\"data_offsets\":[{offset},{end}]}}",
            t.name
        )
        .expect("writing to a String");
        offset = end;
    }
    json.push('}');
    // Like the reference writer, pad the header so the data is 8-aligned.
    while json.len() % 8 != 0 {
        json.push(' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out
}

fn create(path: &Path) -> Result<BufWriter<File>, String> {
    let f = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(BufWriter::with_capacity(8 << 20, f))
}

fn finish(path: &Path, mut w: BufWriter<File>) -> Result<(), String> {
    w.flush().map_err(|e| format!("{}: {e}", path.display()))?;
    w.into_inner()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .sync_all()
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn write_shard(path: &Path, tensors: &[Tensor]) -> Result<u64, String> {
    let mut w = create(path)?;
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let header = safetensors_header(tensors);
    w.write_all(&header).map_err(io)?;
    let mut total = header.len() as u64;
    let mut buf = vec![0u8; 4 << 20];
    for t in tensors {
        let mut xof = weights(&t.name);
        let mut left = t.bytes();
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            xof.fill(&mut buf[..n]);
            bf16ify(&mut buf[..n]);
            w.write_all(&buf[..n]).map_err(io)?;
            left -= n as u64;
        }
        total += t.bytes();
    }
    finish(path, w)?;
    Ok(total)
}

fn write_small(path: &Path, text: &str) -> Result<u64, String> {
    let mut w = create(path)?;
    w.write_all(text.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    finish(path, w)?;
    Ok(text.len() as u64)
}

fn config_json() -> String {
    format!(
        "{{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"hidden_size\": {HIDDEN},\n  \
         \"intermediate_size\": {INTERMEDIATE},\n  \"num_key_value_heads\": 4,\n  \
         \"num_attention_heads\": 32,\n  \"model_type\": \"llama\",\n  \"torch_dtype\": \"bfloat16\",\n  \
         \"vocab_size\": {VOCAB}\n}}\n"
    )
}

fn tokenizer_json() -> String {
    let mut s = String::from("{\"version\":\"1.0\",\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for i in 0..VOCAB {
        if i > 0 {
            s.push(',');
        }
        write!(s, "\"tok{i:x}\":{i}").expect("writing to a String");
    }
    s.push_str("}}}\n");
    s
}

fn gen(args: &[String]) -> Result<(), String> {
    let mut pos = Vec::new();
    let mut shards = 1u64;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--shards" {
            let v = it.next().ok_or("--shards needs a value")?;
            shards = parse(v, "--shards")?;
        } else {
            pos.push(a.as_str());
        }
    }
    let [dir, size] = pos[..] else {
        return Err(usage());
    };
    let size_mib: u64 = parse(size, "SIZE_MIB")?;
    if shards == 0 || shards > 99_999 {
        return Err("--shards must be 1..=99999".into());
    }
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;

    let small = [
        ("config.json", config_json()),
        ("tokenizer.json", tokenizer_json()),
    ];
    let small_bytes: u64 = small.iter().map(|(_, t)| t.len() as u64).sum();
    // Every shard gets an equal share of the tensor bytes.
    let budget = (size_mib * MIB).saturating_sub(small_bytes) / shards;
    let mut it = templates().peekable();
    let groups: Vec<Vec<Tensor>> = (0..shards).map(|_| take_tensors(&mut it, budget)).collect();
    let total: u64 = groups.iter().flatten().map(Tensor::bytes).sum();

    let mut written = 0u64;
    let mut files = 0u64;
    let mut weight_map = String::new();
    for (i, group) in groups.iter().enumerate() {
        let name = format!("model-{:05}-of-{shards:05}.safetensors", i + 1);
        written += write_shard(&dir.join(&name), group)?;
        files += 1;
        for t in group {
            if !weight_map.is_empty() {
                weight_map.push(',');
            }
            write!(weight_map, "\"{}\":\"{name}\"", t.name).expect("writing to a String");
        }
    }
    if shards > 1 {
        let index = format!(
            "{{\"metadata\":{{\"total_size\":{total}}},\"weight_map\":{{{weight_map}}}}}\n"
        );
        written += write_small(&dir.join("model.safetensors.index.json"), &index)?;
        files += 1;
    }
    for (name, text) in &small {
        written += write_small(&dir.join(name), text)?;
        files += 1;
    }
    println!(
        "{{\"dir\":\"{}\",\"files\":{files},\"bytes\":{written}}}",
        dir.display()
    );
    Ok(())
}

/// Best-of-`n` wall time of `f`, in seconds.
fn best_of(n: usize, mut f: impl FnMut()) -> f64 {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn primitives(args: &[String]) -> Result<(), String> {
    let size_mib: u64 = match args.first() {
        Some(s) => parse(s, "SIZE_MIB")?,
        None => 512,
    };
    if size_mib == 0 {
        return Err("SIZE_MIB must be at least 1".into());
    }
    let mut buf = vec![0u8; (size_mib * MIB) as usize];
    weights("primitives").fill(&mut buf);
    bf16ify(&mut buf);
    let cutter = ChunkingParams::default()
        .cutter()
        .map_err(|e| e.to_string())?;
    let mib = size_mib as f64;

    // Best of 5 to see past a noisy neighbour. Each primitive is timed on
    // one core and on all cores at once (each core its own share), which is
    // the limit the pipeline is compared with. As in the pipeline, FastCDC
    // streams the data from memory (it touches each byte first) while the
    // hashes run over a 4 MiB piece, the average chunk, that is in cache.
    const PIECE: usize = 4 << 20;
    let cdc = |part: &[u8]| {
        let mut data = part;
        let mut chunks = 0usize;
        while !data.is_empty() {
            let n = cutter.cut(data);
            data = &data[n..];
            chunks += 1;
        }
        std::hint::black_box(chunks);
    };
    let sha = |part: &[u8]| {
        let piece = &part[..PIECE.min(part.len())];
        for _ in 0..part.len() / piece.len() {
            std::hint::black_box(sha2::Sha256::digest(std::hint::black_box(piece)));
        }
    };
    let b3 = |part: &[u8]| {
        let piece = &part[..PIECE.min(part.len())];
        for _ in 0..part.len() / piece.len() {
            std::hint::black_box(blake3::hash(std::hint::black_box(piece)));
        }
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let one = |f: &(dyn Fn(&[u8]) + Sync)| mib / best_of(5, || f(&buf));
    let all = |f: &(dyn Fn(&[u8]) + Sync)| {
        let part = buf.len().div_ceil(cores);
        mib / best_of(5, || {
            std::thread::scope(|s| {
                for p in buf.chunks(part) {
                    s.spawn(move || f(p));
                }
            })
        })
    };
    println!(
        "{{\"cdc_mibs\":{:.1},\"sha256_mibs\":{:.1},\"blake3_mibs\":{:.1},\"cdc_all_mibs\":{:.1},\"sha256_all_mibs\":{:.1},\"blake3_all_mibs\":{:.1},\"cores\":{cores}}}",
        one(&cdc),
        one(&sha),
        one(&b3),
        all(&cdc),
        all(&sha),
        all(&b3),
    );
    Ok(())
}

fn decode(args: &[String]) -> Result<(), String> {
    const PER_FILE: u64 = 250;
    const PER_DIR: u64 = 100;
    let n_chunks: u64 = match args.first() {
        Some(s) => parse(s, "N_CHUNKS")?,
        None => 250_000,
    };
    let params = ChunkingParams::default();
    let n_files = n_chunks.div_ceil(PER_FILE).max(1);
    // Digests and lengths are pseudo-random but deterministic.
    let mut rng = weights("decode");
    let mut next = |n: usize| {
        let mut b = [0u8; 68];
        rng.fill(&mut b[..n]);
        b
    };
    let mut entries = Vec::new();
    for d in 0..n_files.div_ceil(PER_DIR) {
        entries.push(Entry {
            path: format!("shards-{d:03}"),
            mode: 0o755,
            data: EntryData::Dir,
        });
    }
    let mut left = n_chunks;
    for f in 0..n_files {
        let count = left.min(PER_FILE);
        left -= count;
        let mut chunks = Vec::with_capacity(count as usize);
        let mut offset = 0u64;
        for i in 0..count {
            let b = next(68);
            let r = u32::from_le_bytes(b[64..].try_into().expect("4 bytes"));
            // Between min and max, the last chunk of a file possibly shorter.
            let length = if i + 1 == count {
                1 + r % params.max
            } else {
                params.min + r % (params.max - params.min + 1)
            };
            chunks.push(ChunkRef {
                offset,
                length,
                sha256: Sha256Digest(b[..32].try_into().expect("32 bytes")),
            });
            offset += u64::from(length);
        }
        // Made-up chaining values, one per MiB as a real file has; the
        // file's hash is what they merge to, so decoding checks them all.
        let pieces: Vec<[u8; 32]> = (0..sealvol_spec::chain::piece_count(offset))
            .map(|_| next(32)[..32].try_into().expect("32 bytes"))
            .collect();
        let file_b3 = if pieces.is_empty() {
            B3Digest(next(32)[..32].try_into().expect("32 bytes"))
        } else {
            sealvol_spec::chain::combine(&pieces, offset).expect("one value per piece")
        };
        entries.push(Entry {
            path: format!("shards-{:03}/model-{f:05}.safetensors", f / PER_DIR),
            mode: 0o644,
            data: EntryData::File {
                size: offset,
                blake3: file_b3,
                chunks,
                pieces,
            },
        });
    }
    let tree = TreeIndex::new(params, entries).map_err(|e| e.to_string())?;
    let encoded = tree.encode().map_err(|e| e.to_string())?;
    let mut ok = true;
    let secs = best_of(5, || {
        ok &= std::hint::black_box(TreeIndex::decode(std::hint::black_box(&encoded))).is_ok();
    });
    if !ok {
        return Err("the encoded index did not decode".into());
    }
    println!(
        "{{\"chunks\":{n_chunks},\"encoded_bytes\":{},\"decode_seconds\":{secs:.6}}}",
        encoded.len()
    );
    Ok(())
}

/// Bytes that differ between the files of `old` and `new` with the same
/// path (all of a file's bytes when only `new` has it, or its size
/// changed): the least any delta upload sends.
fn changed_bytes(old: &Path, new: &Path) -> Result<u64, String> {
    let mut changed = 0u64;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = new.join(&rel);
        for e in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
            let rel = rel.join(e.file_name());
            let kind = e
                .file_type()
                .map_err(|e| format!("{}: {e}", rel.display()))?;
            if kind.is_dir() {
                stack.push(rel);
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            let b = std::fs::read(new.join(&rel)).map_err(|e| format!("{}: {e}", rel.display()))?;
            match std::fs::read(old.join(&rel)) {
                Ok(a) if a.len() == b.len() => {
                    changed += a.iter().zip(&b).filter(|(x, y)| x != y).count() as u64
                }
                _ => changed += b.len() as u64,
            }
        }
    }
    Ok(changed)
}

fn dedup(args: &[String]) -> Result<(), String> {
    let mut pos = Vec::new();
    let mut sets = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--params" {
            let v = it.next().ok_or("--params needs MIN,AVG,MAX")?;
            let n: Vec<u32> = v
                .split(',')
                .map(|x| parse(x, "--params"))
                .collect::<Result<_, _>>()?;
            let [min, avg, max] = n[..] else {
                return Err("--params needs MIN,AVG,MAX".into());
            };
            let p = ChunkingParams { min, avg, max };
            p.validate().map_err(|e| format!("--params {v}: {e}"))?;
            sets.push(p);
        } else {
            pos.push(a.as_str());
        }
    }
    let [old, new] = pos[..] else {
        return Err(usage());
    };
    if sets.is_empty() {
        sets.push(ChunkingParams::default());
    }
    let (old, new) = (Path::new(old), Path::new(new));
    let changed = changed_bytes(old, new)?;
    for params in sets {
        let opts = sealvol_client::SealOptions {
            params,
            cache_dir: sealvol_client::CacheDir::Off,
            read_mode: sealvol_client::ReadMode::Mmap,
            ..Default::default()
        };
        let seal = |dir: &Path| {
            sealvol_client::seal(dir, &opts).map_err(|e| format!("{}: {e}", dir.display()))
        };
        let (a, b) = (seal(old)?, seal(new)?);
        let had: std::collections::HashSet<Sha256Digest> =
            a.chunk_locations().into_iter().map(|l| l.sha256).collect();
        let locs = b.chunk_locations();
        let fresh: u64 = locs
            .iter()
            .filter(|l| !had.contains(&l.sha256))
            .map(|l| u64::from(l.length))
            .sum();
        println!(
            "{{\"min\":{},\"avg\":{},\"max\":{},\"chunks\":{},\"bytes\":{},\"changed_bytes\":{changed},\"new_chunk_bytes\":{fresh},\"sent_per_changed\":{:.4}}}",
            params.min,
            params.avg,
            params.max,
            locs.len(),
            b.stats.bytes,
            fresh as f64 / changed.max(1) as f64
        );
    }
    Ok(())
}
