print("dbx-emulator: not built yet")
