//! The Python package (`python/`) end to end: pytest, run by the Python of KAHUNA_PYTHON, in
//! which `.ci/run` has built and installed the package (`maturin develop`) beside PyPI's
//! `datafusion`. Without KAHUNA_PYTHON, or without the package in it, the test says it is
//! skipped.

mod common;

use std::process::Command;

use common::package_dir;

#[test]
fn the_python_package_passes_its_tests_against_pypis_datafusion() {
    let Some(python) = std::env::var_os("KAHUNA_PYTHON") else {
        println!("skipped: KAHUNA_PYTHON names no Python (.ci/run makes a venv with the package)");
        return;
    };
    let installed = Command::new(&python).args(["-c", "import kahuna"]).output().expect("KAHUNA_PYTHON runs");
    if !installed.status.success() {
        println!(
            "skipped: the Python of KAHUNA_PYTHON has no `kahuna` package (`maturin develop -m python/Cargo.toml` builds it): {}",
            String::from_utf8_lossy(&installed.stderr).trim()
        );
        return;
    }
    let result = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests"])
        .current_dir(package_dir())
        .env("KAHUNA_BIN", env!("CARGO_BIN_EXE_kahuna"))
        .output()
        .expect("pytest runs");
    let report = format!("{}{}", String::from_utf8_lossy(&result.stdout), String::from_utf8_lossy(&result.stderr));
    println!("{report}");
    assert!(result.status.success(), "pytest failed:\n{report}");
    assert!(!report.contains("skipped"), "pytest skipped tests:\n{report}");
}
