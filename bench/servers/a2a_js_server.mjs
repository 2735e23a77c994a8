// The @a2a-js/sdk reference server of the benchmark: the SDK's express
// JSON-RPC handler, its DefaultRequestHandler and its InMemoryTaskStore, with
// an agent that answers every SendMessage with a Task in TASK_STATE_SUBMITTED
// (as Beacon does) and does nothing else.
//
// bench/run copies this file next to the node_modules it installs in
// bench/.work/node (ES modules resolve packages from the script's folder)
// and runs:
//
//     node a2a_js_server.mjs --port 9002
//
// Serves the card at /.well-known/agent-card.json and JSON-RPC at /a2a/v1
// (A2A-Version: 1.0 required, as the SDK checks it).

import express from 'express';
import { AGENT_CARD_PATH, TaskState } from '@a2a-js/sdk';
import {
  AgentEvent,
  DefaultRequestHandler,
  InMemoryTaskStore,
} from '@a2a-js/sdk/server';
import {
  agentCardHandler,
  jsonRpcHandler,
  UserBuilder,
} from '@a2a-js/sdk/server/express';

const RPC_PATH = '/a2a/v1';

function parsePort(argv) {
  const i = argv.indexOf('--port');
  const port = i >= 0 ? Number(argv[i + 1]) : NaN;
  if (!Number.isInteger(port) || port <= 0) {
    console.error('usage: node a2a_js_server.mjs --port PORT');
    process.exit(2);
  }
  return port;
}

const port = parsePort(process.argv);

const card = {
  name: 'bench-a2a-js',
  description: 'Benchmark reference agent: answers SendMessage with a submitted Task.',
  version: '1.0.0',
  supportedInterfaces: [
    {
      url: `http://127.0.0.1:${port}${RPC_PATH}`,
      protocolBinding: 'JSONRPC',
      protocolVersion: '1.0',
    },
  ],
  provider: undefined,
  capabilities: { streaming: false, pushNotifications: false, extensions: [] },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ['text/plain'],
  defaultOutputModes: ['application/json'],
  skills: [
    {
      id: 'submit',
      name: 'Submit',
      description: 'Stores a message and answers a submitted Task.',
      tags: ['bench'],
      examples: [],
      inputModes: [],
      outputModes: [],
      securityRequirements: [],
    },
  ],
  signatures: [],
};

class SubmittedAgent {
  async execute(requestContext, eventBus) {
    eventBus.publish(
      AgentEvent.task({
        id: requestContext.taskId,
        contextId: requestContext.contextId,
        status: {
          state: TaskState.TASK_STATE_SUBMITTED,
          message: undefined,
          timestamp: new Date().toISOString(),
        },
        artifacts: [],
        history: [],
        metadata: {},
      })
    );
    eventBus.finished();
  }

  async cancelTask() {
    throw new Error('not cancelable');
  }
}

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new SubmittedAgent());

const app = express();
app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }));
app.use(
  RPC_PATH,
  jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication })
);

const server = app.listen(port, '127.0.0.1', () => {
  console.log(`a2a-js bench server on http://127.0.0.1:${port}`);
});

function stop() {
  server.close(() => process.exit(0));
  server.closeAllConnections?.();
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
