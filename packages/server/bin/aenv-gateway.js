#!/usr/bin/env node
import "../dist/gateway/main.js";
