#!/bin/sh
# Installs Debian's chromium for the JupyterLab browser test when it is missing.
# Playwright drives this browser (executable_path); it never downloads its own.
command -v chromium >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium for the browser test..."
    (apt-get install -y -q chromium >/dev/null 2>&1 || \
        (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1)) \
        && exit 0
fi
if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo -n apt-get install -y -q chromium >/dev/null 2>&1 && exit 0
fi
echo "note: chromium is not installed and could not be installed here;" \
     "the browser test will be skipped (install Debian's 'chromium' package to run it)."
exit 0
