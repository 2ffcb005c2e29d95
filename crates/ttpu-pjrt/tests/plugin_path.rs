//! Where the plugin is looked for: `TTPU_PJRT_PLUGIN`, else the location
//! `cargo xtask setup` installs to under `XDG_CACHE_HOME` or `~/.cache`.
//!
//! This binary holds a single test because it changes environment
//! variables, which must not race with other threads reading them.

use std::path::PathBuf;

use ttpu_pjrt::{default_plugin_path, find_plugin, plugin_path_from_env_or_default};

/// Sets or removes an environment variable.
#[allow(unsafe_code)] // `std::env::set_var` is `unsafe` since edition 2024.
fn set(name: &str, value: Option<&str>) {
    // SAFETY: this test binary runs one test on one thread, and nothing else
    // in the process reads the environment concurrently.
    unsafe {
        match value {
            Some(v) => std::env::set_var(name, v),
            None => std::env::remove_var(name),
        }
    }
}

#[test]
fn plugin_location_follows_env_then_xdg_then_home() {
    let suffix = "ttpu/plugins/cpu/pjrt_c_api_cpu_plugin.so";
    set("TTPU_PJRT_PLUGIN", None);

    set("XDG_CACHE_HOME", Some("/xdg/cache"));
    set("HOME", Some("/home/someone"));
    assert_eq!(default_plugin_path(), Some(PathBuf::from("/xdg/cache").join(suffix)));

    // A relative XDG_CACHE_HOME is invalid per the XDG spec and ignored.
    set("XDG_CACHE_HOME", Some("relative/cache"));
    assert_eq!(default_plugin_path(), Some(PathBuf::from("/home/someone/.cache").join(suffix)));

    set("XDG_CACHE_HOME", None);
    assert_eq!(default_plugin_path(), Some(PathBuf::from("/home/someone/.cache").join(suffix)));
    assert_eq!(plugin_path_from_env_or_default(), default_plugin_path());

    set("TTPU_PJRT_PLUGIN", Some("/opt/pjrt/plugin.so"));
    assert_eq!(plugin_path_from_env_or_default(), Some(PathBuf::from("/opt/pjrt/plugin.so")));
    assert_eq!(
        find_plugin().expect_err("no such file").to_string(),
        "no pjrt plugin found at /opt/pjrt/plugin.so: run `cargo xtask setup` or set TTPU_PJRT_PLUGIN"
    );

    set("TTPU_PJRT_PLUGIN", None);
    set("HOME", None);
    assert_eq!(default_plugin_path(), None);
    assert_eq!(
        find_plugin().expect_err("nowhere to look").to_string(),
        "no pjrt plugin found at an unknown location (neither XDG_CACHE_HOME nor HOME is set): \
         run `cargo xtask setup` or set TTPU_PJRT_PLUGIN"
    );
}
