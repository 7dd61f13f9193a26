// 405 for a known path called with the wrong method, 404 for an unknown path; both JSON bodies.
// Known paths are collected as routes are registered, so the guard cannot drift from the routes.
import type { FastifyInstance } from 'fastify';
import { errors } from '../core/errors.js';
import { sendError } from './error-handler.js';

export function installMethodGuard(app: FastifyInstance): void {
  const methodsByPath = new Map<string, Set<string>>();
  app.addHook('onRoute', (route) => {
    const methods = methodsByPath.get(route.url) ?? new Set<string>();
    for (const method of [route.method].flat()) methods.add(method);
    methodsByPath.set(route.url, methods);
  });
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?', 1)[0] ?? '';
    const methods = methodsByPath.get(path);
    if (methods) {
      reply.header('allow', [...methods].join(', '));
      return sendError(reply, errors.methodNotAllowed());
    }
    return sendError(reply, errors.notFound());
  });
}
