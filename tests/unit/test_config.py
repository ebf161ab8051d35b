"""Settings are validated at start-up with messages that name the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from alnair_common import ConfigError, ServiceSettings, load_settings


def test_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALNAIR_NATS_URL", "nats://10.0.0.1:4222,nats://10.0.0.2:4222")
    monkeypatch.setenv("ALNAIR_NODE_NAME", "gpu-7")
    s = load_settings(ServiceSettings)
    assert s.nats_servers == ["nats://10.0.0.1:4222", "nats://10.0.0.2:4222"]
    assert s.node_name == "gpu-7"


def test_bad_values_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALNAIR_HEALTH_PORT", "99999")
    monkeypatch.setenv("ALNAIR_NATS_URL", "http://x")
    with pytest.raises(ConfigError) as e:
        load_settings(ServiceSettings)
    assert "ALNAIR_HEALTH_PORT='99999'" in str(e.value)
    assert "ALNAIR_NATS_URL" in str(e.value) and "nats://" in str(e.value)


def test_file_values_yield_to_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "alnair.toml"
    cfg.write_text('node_name = "from-file"\nlog_level = "debug"\n')
    monkeypatch.setenv("ALNAIR_CONFIG", str(cfg))
    monkeypatch.setenv("ALNAIR_NODE_NAME", "from-env")
    s = load_settings(ServiceSettings)
    assert (s.node_name, s.log_level) == ("from-env", "debug")


def test_unknown_setting_in_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "alnair.toml"
    cfg.write_text("nats_ulr = 'nats://x:1'\n")
    monkeypatch.setenv("ALNAIR_CONFIG", str(cfg))
    with pytest.raises(ConfigError, match="ALNAIR_NATS_ULR"):
        load_settings(ServiceSettings)


def test_unreadable_file_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "broken.toml"
    cfg.write_text("this is = = not toml")
    monkeypatch.setenv("ALNAIR_CONFIG", str(cfg))
    with pytest.raises(ConfigError, match="cannot read it as TOML"):
        load_settings(ServiceSettings)
