"""The speaker agent (`hubd speaker`): a Linux box with a loudspeaker as a speaker on hubd's MQTT topics.

`config` (speaker.yaml), `template` (command lines: split first, then filled), `process` (running one
child at a time and ending it), `sound` (the tts, players and mixer found at start), `fetch` (audio
downloads), `assistant` (asr: Home Assistant or a command), `mixer` (Volume and Mute, pure), `wire` (the
announced config and the commands, pure), `agent` (the MQTT session, command queue, results, controls,
stop) and `check` (`--check`). Nothing outside this package imports it but hubd.cli.
"""
