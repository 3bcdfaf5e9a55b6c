//! The tracer never changes the program it traces: every traced entry
//! point, called with bad arguments (outputs and inputs pointing nowhere)
//! on the stand-in driver with every call failing and writing nothing (as
//! a real driver may), gives the same result and the same fate traced and
//! untraced, whether the program links libcuda, looks the symbol up with
//! `dlsym`, or asks `cuGetProcAddress`. The calls a real driver rejects
//! (tests/programs/bad_args.c) fare the same. The C programs are built
//! here with `cc` (skipped, and said so, without one).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn tracer() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().join("libipc_tracer.so");
    assert!(lib.is_file(), "{} was not built", lib.display());
    lib
}

/// A C type for one of the wrapper's Rust argument types.
fn c_type(rust: &str) -> &'static str {
    let rust: String = rust.split_whitespace().collect();
    if rust.starts_with('*') {
        return "void *";
    }
    match rust.as_str() {
        "u64" => "unsigned long long",
        "usize" => "size_t",
        "c_int" | "i32" => "int",
        "c_uint" | "u32" => "unsigned",
        "u8" => "unsigned char",
        "u16" => "unsigned short",
        "IpcHandle" => "CUipcHandle",
        other => panic!("no C type for {other}"),
    }
}

/// `(name: type, ...)` as `stringify!` writes it -> C types.
fn params(signature: &str) -> Vec<&'static str> {
    let inner = signature
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')');
    inner
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| c_type(p.split_once(':').unwrap().1))
        .collect()
}

/// The stubs (every traced entry point, weak, failing) and the caller
/// program (each entry point with bad arguments, in a child of its own).
fn generate(dir: &Path) {
    let mut stubs = String::from(
        "#include <stddef.h>\ntypedef int CUresult;\ntypedef struct { unsigned char reserved[64]; } CUipcHandle;\n\
         struct entry { const char *name; void *fn; };\n",
    );
    let mut program = String::from(
        "#include <dlfcn.h>\n#include <stdio.h>\n#include <string.h>\n#include <sys/wait.h>\n#include <unistd.h>\n\
         typedef int CUresult;\ntypedef struct { unsigned char reserved[64]; } CUipcHandle;\n\
         typedef CUresult (*GetProc)(const char *, void **, int, unsigned long long, int *);\n",
    );
    let mut table = String::new();
    let mut callers = String::new();
    for (i, (name, signature)) in ipc_tracer::SIGNATURES.iter().enumerate() {
        let types = params(signature);
        let decl: Vec<String> = types
            .iter()
            .enumerate()
            .map(|(k, t)| format!("{t} a{k}"))
            .collect();
        let decl = if decl.is_empty() {
            "void".to_string()
        } else {
            decl.join(", ")
        };
        stubs += &format!("__attribute__((weak)) CUresult {name}({decl}) {{ return 1; }}\n");
        table += &format!("    {{\"{name}\", (void *){name}}},\n");
        let args: Vec<&str> = types
            .iter()
            .map(|t| match *t {
                "void *" => "(void *)0x10",
                "CUipcHandle" => "bad",
                _ => "7",
            })
            .collect();
        let types = if types.is_empty() {
            "void".to_string()
        } else {
            types.join(", ")
        };
        program += &format!("extern CUresult {name}();\n");
        callers += &format!(
            "static CUresult call_{i}(void *f) {{ CUipcHandle bad; memset(&bad, 0x5a, sizeof bad); (void)bad; \
             return ((CUresult (*)({types}))f)({}); }}\n",
            args.join(", ")
        );
    }
    stubs += &format!(
        "const struct entry fake_all[] = {{\n{table}}};\nconst int fake_all_count = {};\n",
        ipc_tracer::SIGNATURES.len()
    );
    program += &callers;
    program += "struct call { const char *name; void *direct; CUresult (*call)(void *); };\n";
    program += "static const struct call calls[] = {\n";
    for (i, (name, _)) in ipc_tracer::SIGNATURES.iter().enumerate() {
        program += &format!("    {{\"{name}\", (void *){name}, call_{i}}},\n");
    }
    program += "};\n";
    program += r#"
int main(int argc, char **argv) {
    const char *route = argc > 1 ? argv[1] : "direct";
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        int fds[2], status;
        CUresult r = -1;
        if (pipe(fds)) return 2;
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            void *f = calls[i].direct;
            if (strcmp(route, "direct") != 0) {
                void *lib = dlopen("libcuda.so.1", RTLD_NOW);
                f = lib ? dlsym(lib, calls[i].name) : 0;
                if (f && strcmp(route, "procaddress") == 0) {
                    GetProc get = (GetProc)dlsym(lib, "cuGetProcAddress_v2");
                    int found = 0;
                    f = 0;
                    if (get) get(calls[i].name, &f, 13000, 0, &found);
                }
            }
            if (!f) _exit(4);
            r = calls[i].call(f);
            if (write(fds[1], &r, sizeof r) != sizeof r) _exit(3);
            _exit(0);
        }
        close(fds[1]);
        waitpid(child, &status, 0);
        if (WIFSIGNALED(status)) printf("%s signal %d\n", calls[i].name, WTERMSIG(status));
        else if (read(fds[0], &r, sizeof r) == sizeof r) printf("%s %d\n", calls[i].name, r);
        else printf("%s exit %d\n", calls[i].name, WEXITSTATUS(status));
        close(fds[0]);
    }
    return 0;
}
"#;
    std::fs::write(dir.join("stubs.c"), stubs).unwrap();
    std::fs::write(dir.join("calls.c"), program).unwrap();
}

fn workdir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        if Command::new("cc").arg("--version").output().is_err() {
            eprintln!("SKIPPED: no C compiler (cc) to build the transparency programs");
            return None;
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("transparency-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        generate(&dir);
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
        let cc = |args: &[&str]| {
            let out = Command::new("cc")
                .args(args)
                .current_dir(&dir)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "cc {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let fake = src.join("fake/libcuda.c");
        cc(&[
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            "libcuda.so.1",
            fake.to_str().unwrap(),
            "stubs.c",
        ]);
        std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
        cc(&[
            "-std=gnu11",
            "-o",
            "calls",
            "calls.c",
            "-L.",
            "-lcuda",
            "-ldl",
        ]);
        let bad = src.join("programs/bad_args.c");
        cc(&["-o", "bad_args", bad.to_str().unwrap(), "-L.", "-lcuda"]);
        Some(dir)
    })
    .clone()
}

/// Run `program args` untraced and traced; give back both outputs and the
/// trace folder.
fn both_ways(dir: &Path, name: &str, args: &[&str], reject: bool) -> (String, String, PathBuf) {
    let traces = dir.join(format!("traces-{name}-{}", args.join("-")));
    let _ = std::fs::remove_dir_all(&traces);
    std::fs::create_dir_all(&traces).unwrap();
    let run = |traced: bool| {
        let mut cmd = Command::new(dir.join(name));
        cmd.args(args)
            .current_dir(dir)
            .env("LD_LIBRARY_PATH", dir)
            .env_remove("LD_PRELOAD")
            .env_remove("IPC_TRACE_DIR");
        if reject {
            cmd.env("FAKE_CUDA_REJECT", "1");
        }
        if traced {
            cmd.env("LD_PRELOAD", tracer())
                .env("IPC_TRACE_DIR", &traces);
        }
        let out = cmd.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name} {args:?} traced={traced}: {out:?}"
        );
        String::from_utf8(out.stdout).unwrap()
    };
    (run(false), run(true), traces)
}

#[test]
fn every_traced_entry_point_with_bad_arguments_fares_the_same_traced() {
    let Some(dir) = workdir() else { return };
    for route in ["direct", "dlsym", "procaddress"] {
        let (untraced, traced, traces) = both_ways(&dir, "calls", &[route], true);
        assert_eq!(
            untraced.lines().count(),
            ipc_tracer::SIGNATURES.len(),
            "{route}: {untraced}"
        );
        for line in untraced.lines() {
            assert!(
                line.ends_with(" 1"),
                "{route}: the stand-in rejects every call: {line}"
            );
        }
        let differ: Vec<(&str, &str)> = untraced
            .lines()
            .zip(traced.lines())
            .filter(|(a, b)| a != b)
            .collect();
        assert!(
            differ.is_empty(),
            "{route}: untraced vs traced: {differ:#?}"
        );
        assert_eq!(untraced, traced, "{route}");
        // Every entry point was recorded, through every route.
        let mut recorded = std::collections::BTreeSet::new();
        for file in std::fs::read_dir(&traces).unwrap().flatten() {
            for line in std::fs::read_to_string(file.path()).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                if v["kind"] == "call" {
                    recorded.insert(v["call"].as_str().unwrap().to_string());
                }
            }
        }
        let missing: Vec<&&str> = ipc_tracer::TRACED
            .iter()
            .filter(|n| !recorded.contains(**n))
            .collect();
        assert!(missing.is_empty(), "{route}: not recorded: {missing:?}");
    }
}

#[test]
fn calls_a_driver_rejects_fare_the_same_traced() {
    let Some(dir) = workdir() else { return };
    let (untraced, traced, _) = both_ways(&dir, "bad_args", &[], false);
    assert_eq!(untraced.lines().count(), 10, "{untraced}");
    assert!(!untraced.contains("signal"), "{untraced}");
    assert!(!untraced.contains(": 0\n"), "each call fails: {untraced}");
    assert_eq!(untraced, traced);
}
